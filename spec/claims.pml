/*
 * The claim protocol of shardcron's coordination, for SPIN (spin -a claims.pml).
 *
 * Processes: the registry (ZooKeeper), NI instances and one leader. Every request is a
 * message on its session's FIFO channel; the registry takes the head of any session's
 * channel (delivery order between sessions is arbitrary) and applies it atomically, as
 * a multi-op is, unless its session ended (ZooKeeper refuses it; the client hears an
 * error). Up to FAULTS requests are lost before being applied or applied with their
 * answer lost; up to ENDS sessions end, by a crash (the process restarts with the same
 * id, as in a container) or by expiry (the process lives on, its runs too). A request's
 * fate is decided before its sender hears of a failure: a session's requests are applied
 * in order and a session moved to another server fails its old ones.
 *
 * Modelled registry nodes (src/shardcron/coordination/paths.py):
 *   sharding/{i}            item[i], version ver[i]
 *   sharding/{i}/running    running[i] (holder id), czxid rtok[i] (the fencing token)
 *   sharding/{i}/instance   own[i]
 *   sharding/{i}/failover   fo[i] (ephemeral of its holder's session)
 *   leader/failover/items/{i}  fq[i]
 *   leases/{id}             lease[p] (with instances/{id}: one registration, one session)
 * Left out, with why: failovering (the persistent twin of failover: only cleaned up),
 * misfire flags (a skipped item's re-run is another fire), leader/sharding/processing
 * (created and deleted in the same multi-op as the layout), leader/sharding/necessary
 * (it only holds fires back; fires here may ignore it, a cache behind).
 *
 * The leader has a session of its own that lives; a former leader's request still on
 * its way is one applied late. A lost answer is a lost connection: the reconnect heals
 * in full (runtime.py:JobRuntime.on_session). Items do not interact, so with one item
 * COUNTS=1 lowers the count to 0: that item stands for any item beyond a lowered count.
 *
 * Over-approximations (more behaviours than the code has, so a property proved here
 * holds there): an instance may claim any item it owned in any layout so far (a cache
 * arbitrarily behind); a claim or repair may be applied arbitrarily late; an instance
 * may fire on a new session before it registers; a client may start a run whose
 * session has expired without it knowing yet.
 *
 * Properties:
 *   I1 (assert at a run's start): no item runs on two instances at once unless the
 *      run with the lower fencing token has lost the session of its claim.
 *   I2 (assert in the registry): no request deletes a `running` it did not read: a
 *      completion deletes only its own claim, a repair only the claim it read, a count
 *      lowering none.
 *   I3 (assert at quiescence, once nothing can move): every run has returned and no
 *      `running` remains whose holder has no lease (-DSTRICT_I3: whose claim's session
 *      ended, even if its holder came back with the same id).
 *
 * Defects, to show the checks can fail (-D at spin -a):
 *   DEFECT_COMPLETE_UNCONDITIONAL  completion without Check(item, version)
 *   DEFECT_REPAIR_UNCONDITIONAL    repair without Check(item, version)
 *   DEFECT_REPAIR_READS_RUNNING_FIRST  repair reads running before the item node
 *   DEFECT_CLAIM_WITHOUT_LEASE     claim without Check(lease)
 *   DEFECT_DROP_WITH_CLAIM         count lowering deletes an item with its claim
 *   DEFECT_SETTLE_ANY_SESSION      a claim whose answer was lost settled on any running
 *                                  naming its instance, an earlier session's too
 *
 * Known gaps SPIN finds in the protocol (docs/guarantees.md, "What is not promised yet"):
 *   -DCOUNTS=2  the count raised back: a dropped item node comes back at version 0, and a
 *               late completion or repair matches a new claim's version (I2, and with
 *               -DNO_I2, I1)
 * Other switches: -DNO_I2, -DSTRICT_I3, -DHEAL_FIRST (fires wait for their connection's
 * heal).
 */

#ifndef NI
#define NI 2            /* instances, ids 1..NI (at most 3) */
#endif
#ifndef NITEMS
#define NITEMS 1        /* items, 0..NITEMS-1 (at most 2) */
#endif
#ifndef FAULTS
#define FAULTS 1        /* requests lost, before or after being applied */
#endif
#ifndef ENDS
#define ENDS 1          /* sessions ended: crashes and expiries */
#endif
#ifndef FIRES
#define FIRES 1         /* normal fires per instance */
#endif
#ifndef COUNTS
#define COUNTS 0        /* operator changes of shardingTotalCount: lower, then raise */
#endif
#ifndef RESHARDS
#define RESHARDS 1      /* layouts the leader writes */
#endif
#ifndef QCAP
#define QCAP 2          /* requests in flight per instance session */
#endif

#define LEADER 0
#define NONE 255

/* Request kinds. */
#define CLAIM 1
#define FCLAIM 2
#define COMPLETE 3
#define REPAIR 4
#define DROP 5
#define RESHARD 6
#define REGISTER 7
#define DELQ 8

/* Answers. */
#define OK 1
#define REFUSED 2
#define UNSURE 3        /* an error: applied or not, the sender cannot tell */

/* An instance's state for one item (src/shardcron/coordination/firing.py). */
#define IDLE 0
#define CLAIMING 1      /* Firing._claiming / failover.Claims._claim in flight */
#define RUNNING 2       /* dispatched: its items run */
#define COMPLETING 3    /* Firing._completing */
#define UNSURE_CLAIM 4  /* Firing._unsure */
#define UNFINISHED 5    /* Firing._unfinished */

#define BIT(i) (1 << (i))
/* ANY(M): some item satisfies M; PICK(M): i := such an item (any of them). */
#if NITEMS > 1
#define ANY(M) (M(0) || M(1))
#define PICK(M) if :: M(0) -> i = 0 :: M(1) -> i = 1 fi
#else
#define ANY(M) M(0)
#define PICK(M) i = 0
#endif
#define IX(p, i) ((p) * NITEMS + (i))

/* ---- registry state ---- */
bool item[NITEMS];
byte ver[NITEMS];
byte running[NITEMS];
byte rtok[NITEMS];
byte own[NITEMS];
byte fo[NITEMS];
bool fq[NITEMS];
bool lease[NI + 1];
byte lz[NI + 1];        /* the zxid when the lease was created: its czxid */
byte sess[NI + 1];      /* current session number of each instance (the leader's is 1) */
bool live[NI + 1];      /* that session lives */
byte zxid;              /* counts claims: their fencing tokens */
byte total = NITEMS;    /* shardingTotalCount */
byte faults;
byte ends;
byte ever[NI + 1];      /* items each instance owned in some layout: what a cache may show */

/* ---- ghost state, for the properties ---- */
byte rses[NITEMS];                    /* session that created running */
bool exe[(NI + 1) * NITEMS];          /* instance p runs item i */
byte etok[(NI + 1) * NITEMS];         /* ... under this token */
byte eses[(NI + 1) * NITEMS];         /* ... claimed in this session */

chan rq[NI + 1] = [QCAP] of { byte, byte, byte, byte, byte, byte };  /* kind sess item ver tok x */
chan an[NI + 1] = [QCAP] of { byte, byte, byte, byte, byte };        /* kind item code tok ver */

/* A session ends: its ephemerals go (src/shardcron/registry/contract.py: Registry.close). */
inline end_session(p) {
    live[p] = false;
    lease[p] = false; lz[p] = 0;
    for (k : 0 .. NITEMS - 1) {
        if
        :: fo[k] == p -> fo[k] = 0
        :: else
        fi
    }
}

/* ---- the registry ---- */

/* I2 can be switched off (-DNO_I2) to see what a deleted claim leads to. */
#ifdef NO_I2
#define I2(c) skip
#else
#define I2(c) assert(c)
#endif

/* The conditions the defects take away. */
#ifdef DEFECT_CLAIM_WITHOUT_LEASE
#define LEASED(p) true
#else
#define LEASED(p) lease[p]
#endif
#ifdef DEFECT_COMPLETE_UNCONDITIONAL
#define COMPLETION_CHECK true
#else
#define COMPLETION_CHECK (ver[i] == v)
#endif
#ifdef DEFECT_REPAIR_UNCONDITIONAL
#define REPAIR_CHECK true
#else
#define REPAIR_CHECK (ver[i] == v)
#endif

/* claims.py:Claiming.ops (Create running, SetData item, Check lease), plus for a
 * failover claim failover.py:claim_ops (Delete the queue entry, Create failover). */
inline apply_claim(p) {
    if
    :: item[i] && running[i] == 0 && LEASED(p) && (kind == CLAIM || (fq[i] && fo[i] == 0)) ->
        zxid++;
        running[i] = p; rtok[i] = zxid; rses[i] = s;
        ver[i]++;
        if
        :: kind == FCLAIM -> fq[i] = false; fo[i] = p
        :: else
        fi;
        code = OK; atok = zxid; aver = ver[i]
    :: else -> code = REFUSED
    fi
}

/* claims.py:Completing (Check item at the claim's version, Delete running; a node gone
 * already is dropped from the ops and the rest retried: the net effect is below), with
 * firing.py:complete's extras: the unrun stamp (SetData item, x bit 0) and
 * failover.py:complete_ops (x bit 1). */
inline apply_complete() {
    if
    :: item[i] && COMPLETION_CHECK ->
        if
        :: running[i] != 0 ->
            I2(rtok[i] == t);   /* I2 */
            running[i] = 0; rtok[i] = 0; rses[i] = 0
        :: else
        fi;
        if
        :: x & 1 -> ver[i]++
        :: else
        fi;
        if
        :: (x & 2) && fo[i] != 0 -> fo[i] = 0
        :: else
        fi;
        code = OK
    :: else -> code = REFUSED
    fi
}

/* healing.py:Healer._repair_claim's transaction: Check item at the version read, Delete
 * running, SetData item (the stamp), then failover.py:queue_ops: Delete failover if the
 * cache showed it (x bit 0), Create the queue entry unless the cache showed it (x bit 1). */
#define FO_AS_READ ((x & 1) == 0 || fo[i] != 0)
#define FQ_AS_READ ((x & 2) != 0 || !fq[i])
inline apply_repair() {
    if
    :: item[i] && running[i] != 0 && REPAIR_CHECK && FO_AS_READ && FQ_AS_READ ->
        I2(rtok[i] == t);       /* I2 */
        running[i] = 0; rtok[i] = 0; rses[i] = 0;
        ver[i]++;
        if
        :: x & 1 -> fo[i] = 0
        :: else
        fi;
        fq[i] = true;
        code = OK
    :: else -> code = REFUSED
    fi
}

/* healing.py:Healer._drop_item's transaction: Delete each child read, then the item
 * node; it fails if a child appeared (NotEmpty) or went (NoNode). x: bit 0 the owner
 * node, bit 1 failover were read. */
#define CHILDREN_AS_READ (((x & 1) != 0) == (own[i] != 0) && ((x & 2) != 0) == (fo[i] != 0))
inline apply_drop() {
    if
#ifdef DEFECT_DROP_WITH_CLAIM
    :: item[i] ->
        if
        :: running[i] != 0 -> I2(rtok[i] == t)   /* I2: t is 0, it read no claim */
        :: else
        fi;
        running[i] = 0; rtok[i] = 0; rses[i] = 0;
#else
    :: item[i] && running[i] == 0 && CHILDREN_AS_READ ->
#endif
        item[i] = false; ver[i] = 0; own[i] = 0; fo[i] = 0;
        code = OK
    :: else -> code = REFUSED
    fi
}

/* sharding.py:Resharding.ops: create the missing item nodes below the count and write
 * the owners (v: owner of item 0 plus 4 times the owner of item 1). */
inline apply_reshard() {
    for (k : 0 .. NITEMS - 1) {
        if
        :: k < total ->
            if
            :: !item[k] -> item[k] = true; ver[k] = 0
            :: else
            fi;
            own[k] = (v >> (2 * k)) & 3;
            ever[own[k]] = ever[own[k]] | BIT(k)
        :: else
        fi
    }
    code = OK
}

/* One request's ops, applied all or none (registry/contract.py:Registry.transaction). */
inline apply(p) {
    if
    :: kind == CLAIM || kind == FCLAIM -> apply_claim(p)
    :: kind == COMPLETE -> apply_complete()
    :: kind == REPAIR -> apply_repair()
    :: kind == DROP -> apply_drop()
    :: kind == RESHARD -> apply_reshard()
    :: kind == REGISTER -> lease[p] = true; lz[p] = zxid; code = OK; aver = s   /* runtime.py:JobRuntime.register */
    :: kind == DELQ -> fq[i] = false; code = OK   /* healing.py:Healer._repair_job */
    fi
}

/* The registry takes the next request of session p's channel
 * (registry/contract.py:Registry.send_transaction). The printf lines show in a trail:
 * spin -t claims.pml. */
inline serve(p) {
    atomic {
        rq[p]?kind, s, i, v, t, x ->
        code = UNSURE; atok = 0; aver = 0;
        if
        :: s != sess[p] || !live[p] -> skip           /* the session ended: refused */
        :: else ->
            if
            :: apply(p)                                   /* applied, answered */
            :: faults < FAULTS -> faults++; printf("registry: lost before applied\n")
            :: faults < FAULTS -> faults++; apply(p); printf("registry: answer lost\n");
               code = UNSURE; atok = 0; aver = 0
            fi
        fi;
        printf("registry: %d's kind %d of item %d (v%d t%d x%d) -> %d [ver %d running %d tok %d fq %d]\n", p, kind, i, v, t, x, code, ver[i], running[i], rtok[i], fq[i]);
        if
        :: code == UNSURE -> an[p]!kind, i, UNSURE, 0, 0
        :: else -> an[p]!kind, i, code, atok, aver
        fi;
        kind = 0; s = 0; i = 0; v = 0; t = 0; x = 0; code = 0; atok = 0; aver = 0
    }
}

/* A session expires (SessionState.EXPIRED): its process and runs live on. */
inline expire(p) {
    atomic { ends < ENDS && live[p] -> ends++; end_session(p); printf("%d: session %d expires\n", p, sess[p]) }
}

proctype registry() {
    byte kind, s, i, v, t, x, code, atok, aver, k;
end:
    do
    :: serve(0)
    :: serve(1)
    :: expire(1)
#if NI > 1
    :: serve(2)
    :: expire(2)
#endif
#if NI > 2
    :: serve(3)
    :: expire(3)
#endif
    od
}

/* ---- an instance ---- */

/* The room a request needs: every request gets one answer, so requests in flight plus
 * answers not read yet stay within QCAP. */
#define ROOM (len(rq[p]) + len(an[p]) < QCAP)

/* A run starts. I1: of two runs of an item at once, the one with the lower token has
 * lost the session of its claim. */
#define ENDED(q, s) (!live[q] || sess[q] != (s))
inline start(i) {
    for (q : 1 .. NI) {
        if
        :: q != p && exe[IX(q, i)] && etok[IX(q, i)] < ct[i] -> assert(ENDED(q, eses[IX(q, i)]))
        :: q != p && exe[IX(q, i)] && etok[IX(q, i)] >= ct[i] -> assert(ENDED(p, cs[i]) && etok[IX(q, i)] > ct[i])
        :: else
        fi
    }
    q = 0;
    printf("%d: runs item %d (token %d, session %d)\n", p, i, ct[i], cs[i]);
    exe[IX(p, i)] = true; etok[IX(p, i)] = ct[i]; eses[IX(p, i)] = cs[i];
    st[i] = RUNNING
}

/* firing.py:Firing.complete: the claim goes, conditional on its version. x: bit 0 the
 * unrun stamp, bit 1 a failover run's marks. */
inline send_complete(i, unrun) {
    xc[i] = (unrun) | (fov[i] * 2);
    rq[p]!COMPLETE, sess[p], i, cv[i], ct[i], xc[i];
    st[i] = COMPLETING
}

inline forget(i) {
    st[i] = IDLE; cv[i] = 0; ct[i] = 0; cs[i] = 0; fov[i] = false; xc[i] = 0
}

/* claims.py:settle: the claim went through if the session that sent it lives on, and
 * running names this instance and was created after this session's lease (a claim
 * checks the lease: one before it is an earlier session's); then it runs
 * (Firing.resolve -> dispatch). */
#ifdef DEFECT_SETTLE_ANY_SESSION
#define SETTLED(i) (running[i] == p)
#else
#define SETTLED(i) (lease[p] && running[i] == p && rtok[i] > lz[p])
#endif
inline settle(i) {
    if
    :: cs[i] == sess[p] && SETTLED(i) -> ct[i] = rtok[i]; cv[i] = ver[i]; start(i)
    :: else -> forget(i)
    fi
}

/* A claim may be sent on a new connection before the coordinator heals for it (the
 * group commit sends what was asked before): -DHEAL_FIRST keeps fires behind that heal. */
#ifdef HEAL_FIRST
#define FIRES_WAIT healed
#else
#define FIRES_WAIT true
#endif

/* Which items a step may take. */
#define CAN_FIRE(j) (st[j] == IDLE && (ever[p] & BIT(j)))
#define CAN_TAKE(j) (st[j] == IDLE && fq[j])
#define RETURNS(j) (st[j] == RUNNING)
#define UNSETTLED(j) (st[j] == UNSURE_CLAIM)
#define PENDING(j) (st[j] == UNFINISHED)

proctype instance(byte p) {
    byte st[NITEMS], cv[NITEMS], ct[NITEMS], cs[NITEMS], xc[NITEMS];
    bool fov[NITEMS];
    byte fires, regsess, q, k, kind, i, code, t, v, h;
    bool sweep, healed = true;
    regsess = 1;
end:
    do
    /* firing.py:Firing.fire -> _claim_and_run: claim an item of this instance's layout
     * (claims.py:Claiming). */
    :: atomic { live[p] && FIRES_WAIT && ROOM && fires < FIRES && ANY(CAN_FIRE) ->
        PICK(CAN_FIRE);
        fires++;
        rq[p]!CLAIM, sess[p], i, 0, 0, 0;
        st[i] = CLAIMING; cs[i] = sess[p]; fov[i] = false;
        i = 0 }
    /* failover.py:Claims._claim: take a queued item. */
    :: atomic { live[p] && FIRES_WAIT && ROOM && ANY(CAN_TAKE) ->
        PICK(CAN_TAKE);
        rq[p]!FCLAIM, sess[p], i, 0, 0, 0;
        st[i] = CLAIMING; cs[i] = sess[p]; fov[i] = true;
        i = 0 }
    /* The job's code returns: firing.py:Firing.complete. */
    :: atomic { ROOM && ANY(RETURNS) ->
        PICK(RETURNS);
        exe[IX(p, i)] = false; etok[IX(p, i)] = 0; eses[IX(p, i)] = 0;
        printf("%d: item %d returns\n", p, i);
        send_complete(i, 0);
        i = 0 }
    /* firing.py:Firing.resolve: a claim whose answer was lost, settled from the registry
     * (claims.py:settle). Its two reads are one step: between them only this instance
     * could change the item, and it is busy here. */
    :: atomic { live[p] && ANY(UNSETTLED) ->
        PICK(UNSETTLED);
        settle(i);
        i = 0 }
    /* firing.py:Firing.resolve: a completion whose answer was lost, sent again. */
    :: atomic { live[p] && ROOM && ANY(PENDING) ->
        PICK(PENDING);
        rq[p]!COMPLETE, sess[p], i, cv[i], ct[i], xc[i];
        st[i] = COMPLETING;
        i = 0 }
    /* An answer: firing.py:_on_claim (failover.py:Claims._claim), _completion_answered. */
    :: atomic { an[p]?kind, i, code, t, v ->
        if
        :: kind == CLAIM || kind == FCLAIM ->
            if
            :: code == OK -> ct[i] = t; cv[i] = v;
                /* firing.py:Firing.dispatch -> claim_holds: the claim's session is the
                 * client's, and connected as far as it knows: it may have expired. */
                if
                :: cs[i] == sess[p] -> start(i)
                :: !live[p] || cs[i] != sess[p] -> send_complete(i, !fov[i])   /* handed back unrun */
                fi
            :: code == REFUSED -> forget(i)
            :: code == UNSURE -> st[i] = UNSURE_CLAIM
            fi
        :: kind == COMPLETE ->
            if
            :: code == UNSURE -> st[i] = UNFINISHED
            :: else -> forget(i)
            fi
        fi;
        if
        :: code == UNSURE -> sweep = true; healed = false   /* a reconnect: see below */
        :: else
        fi;
        kind = 0; i = 0; code = 0; t = 0; v = 0 }
    /* A crash: the runs die with the process, which restarts with the same id and a new
     * session (registry/contract.py: Registry.close). */
    :: atomic { ends < ENDS && live[p] ->
        ends++;
        end_session(p);
        printf("%d: crashes\n", p);
        for (k : 0 .. NITEMS - 1) {
            forget(k);
            exe[IX(p, k)] = false; etok[IX(p, k)] = 0; eses[IX(p, k)] = 0
        }
        k = 0;
        do
        :: rq[p]?_, _, _, _, _, _
        :: an[p]?_, _, _, _, _
        :: empty(rq[p]) && empty(an[p]) -> break
        od;
        regsess = 0; sweep = false; healed = false }
    /* A new session (SessionState.CONNECTED). */
    :: atomic { !live[p] -> sess[p]++; live[p] = true; healed = false; printf("%d: new session %d\n", p, sess[p]) }
    /* healing.py:Healer.heal(full=True), after a new session or a reconnect (runtime.py:
     * JobRuntime.on_session, on the coordinator thread before any fire of the
     * connection), or while not registered in this session: Firing.resolve settles the
     * claims whose answers were lost, JobRuntime.register (waited for) on a new session,
     * then the sweep repairs this instance's own claims left by an earlier session. A
     * lost answer is a lost connection: a reconnect, and this heal, follow. */
    :: atomic { live[p] && ROOM && (sweep || regsess != sess[p]) ->
        sweep = true; healed = true;
        for (k : 0 .. NITEMS - 1) {
            if
            :: st[k] == UNSURE_CLAIM -> settle(k)
            :: else
            fi
        }
        k = 0 }
       if
       :: regsess != sess[p] ->
           rq[p]!REGISTER, sess[p], 0, 0, 0, 0;
           an[p]??REGISTER, _, code, _, v;
           atomic {
            if
            :: code == OK && v == sess[p] -> regsess = v
            :: else -> sweep = false; healed = false   /* lost: a reconnect, whose heal registers */
            fi;
            code = 0; v = 0 }
       :: else
       fi;
       /* healing.py:Healer._repair_claim of each own claim, each write waited for. */
       if
       :: sweep -> sweep = false; k = 0;
          do
          :: k == NITEMS -> k = 0; break
          :: k < NITEMS && st[k] != IDLE -> k++         /* reserved: a claim of it is here */
          :: k < NITEMS && st[k] == IDLE ->
              atomic { t = item[k]; v = ver[k] }        /* get_with_stats: the item node first */
              atomic {
                if
                :: t && running[k] == p ->                    /* then running: ours, not run here */
                    h = (fo[k] != 0) | (fq[k] * 2);
                    rq[p]!REPAIR, sess[p], k, v, rtok[k], h
                :: else -> h = NONE
                fi }
              if
              :: h == NONE -> k++
              :: else ->
                  an[p]??REPAIR, _, code, _, _;
                  if
                  :: code == UNSURE -> k = NITEMS; sweep = true; healed = false
                  :: else -> k++
                  fi
              fi;
              atomic { v = 0; t = 0; h = 0; code = 0 }
          od
       :: else
       fi
    od
}

/* ---- the leader (its own session, which lives) ---- */

#if NI > 2
#define ALIVE ((lease[1] << 1) | (lease[2] << 2) | (lease[3] << 3))
#define ANYONE (lease[1] || lease[2] || lease[3])
#elif NI > 1
#define ALIVE ((lease[1] << 1) | (lease[2] << 2))
#define ANYONE (lease[1] || lease[2])
#else
#define ALIVE (lease[1] << 1)
#define ANYONE lease[1]
#endif

/* healing.py:Healer._repair_claim, as leader: item node, then running, then the holder's
 * lease; a holder without one lost its claim, repaired conditionally on what was read. */
inline repair_claim(i) {
#ifndef DEFECT_REPAIR_READS_RUNNING_FIRST
    atomic { ex = item[i]; v = ver[i] }
    atomic { h = running[i]; t = rtok[i] }
#else
    atomic { h = running[i]; t = rtok[i] }
    atomic { ex = item[i]; v = ver[i] }
#endif
    if
    :: !ex || h == 0 -> skip
    :: else ->
        atomic {
            if
            :: lease[h] -> h = 0                       /* alive: settled */
            :: else -> rq[0]!REPAIR, 1, i, v, t, (fo[i] != 0) | (fq[i] * 2)
            fi }
        if
        :: h != 0 ->
            an[0]?_, _, code, _, _;
            if
            :: code == REFUSED -> unsettled = true     /* raced: the next heal looks again */
            :: code == UNSURE -> unsettled = true; aborted = true   /* the heal raises */
            :: else
            fi
        :: else
        fi
    fi;
    atomic { ex = false; v = 0; h = 0; t = 0; code = 0 }
}

/* The layout of sharding.py:assign with strategies.py's AVG_ALLOCATION: item k to the
 * k-th live instance, round robin. */
inline plan_layout() {
    n = 0; v = 0;
    for (q : 1 .. NI) {
        if
        :: lease[q] -> n++
        :: else
        fi
    }
    for (k : 0 .. NITEMS - 1) {
        if
        :: k < total ->
            c = 0; j = k % n;
            for (q : 1 .. NI) {
                if
                :: lease[q] && c == j -> v = v | (q << (2 * k)); c++
                :: lease[q] && c != j -> c++
                :: else
                fi
            }
        :: else
        fi
    }
    q = 0; k = 0; n = 0; c = 0; j = 0
}

#define BEYOND(j) (j >= total && item[j] && running[j] == 0)
#define DEAD_ENTRY(j) (j >= total && fq[j])
#define UNOWNED(j) (j < total && (!item[j] || !lease[own[j]]))

proctype leader() {
    byte seen = NONE;        /* Healer._alive: the instances alive when claims were checked */
    byte snap, q, k, n, c, j, i, v, h, t, code, counts, reshards;
    bool ex, unsettled, aborted;
end:
    do
    /* healing.py:Healer.heal: a holder may have died since the claims were last checked
     * (or they were never checked since this leader was elected): check every claim. */
    :: atomic { seen == NONE || (seen & ~ALIVE) != 0 ->
        snap = ALIVE; unsettled = false; aborted = false; i = 0 }
       do
       :: i < NITEMS && !aborted -> repair_claim(i); i++
       :: i == NITEMS || aborted -> break
       od;
       atomic {
        if
        :: !unsettled -> seen = snap
        :: else
        fi;
        snap = 0; i = 0; unsettled = false; aborted = false }
    /* healing.py:Healer._drop_item: an item beyond the count, with no claim under it. */
    :: atomic { ANY(BEYOND) ->
        PICK(BEYOND);
        rq[0]!DROP, 1, i, 0, 0, (own[i] != 0) | ((fo[i] != 0) * 2);
        i = 0 }
       an[0]?_, _, _, _, _
    /* healing.py:sweep's dead_queue_entries: a queue entry beyond the count goes. */
    :: atomic { ANY(DEAD_ENTRY) ->
        PICK(DEAD_ENTRY);
        rq[0]!DELQ, 1, i, 0, 0, 0;
        i = 0 }
       an[0]?_, _, _, _, _
    /* sharding.py:Resharder.reshard: items of gone instances, or below the count and
     * missing, get a layout over the live instances. */
    :: atomic { reshards < RESHARDS && ANYONE && ANY(UNOWNED) ->
        reshards++;
        plan_layout();
        rq[0]!RESHARD, 1, 0, v, 0, 0;
        v = 0 }
       an[0]?_, _, _, _, _
    /* An operator lowers shardingTotalCount, then raises it back (the config node). */
    :: atomic { counts < COUNTS -> counts++;
        if
        :: total == NITEMS -> total = NITEMS - 1
        :: else -> total = NITEMS
        fi }
    od
}

/* I3: once nothing can move, every run has returned and no claim of a holder without a
 * lease is left; with -DSTRICT_I3, no claim of an ended session either (a holder back
 * with the same id on a new session must have repaired its own). */
#ifdef STRICT_I3
#define STALE(k) (running[k] != 0 && !(live[running[k]] && sess[running[k]] == rses[k]))
#else
#define STALE(k) (running[k] != 0 && !lease[running[k]])
#endif
proctype quiescence() {
    byte k, q;
    timeout ->
    for (k : 0 .. NITEMS - 1) {
        assert(!STALE(k));
        for (q : 1 .. NI) {
            assert(!exe[IX(q, k)])
        }
    }
}

init {
    byte p, k;
    atomic {
        sess[LEADER] = 1; live[LEADER] = true;
        for (p : 1 .. NI) {
            sess[p] = 1; live[p] = true; lease[p] = true
        }
        for (k : 0 .. NITEMS - 1) {
            item[k] = true;
            own[k] = k % NI + 1;
            ever[own[k]] = ever[own[k]] | BIT(k)
        }
        run registry();
        run leader();
        for (p : 1 .. NI) {
            run instance(p)
        }
        run quiescence();
        p = 0; k = 0
    }
}
