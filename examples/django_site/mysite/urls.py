from django.http import HttpRequest, HttpResponse
from django.urls import path


def index(_request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello from Django; shardcron jobs run alongside\n")


urlpatterns = [path("", index)]
