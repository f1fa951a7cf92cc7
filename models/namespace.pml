/*
 * The namespace commit of txn_engine (txn_engine/namespace/): a transaction across two
 * tables reserves each table (a no-op version carrying its marker), stages its change,
 * writes its decision with create-if-absent (the commit point) and publishes each staged
 * change as the version after its reservation. Single-table writers settle the marker of
 * the version they build on before they create theirs: a committed transaction's version
 * is published (rolled forward) and the race lost; an undecided one is waited for or,
 * past abort_after, aborted (create-if-absent of the decision again). Readers take the
 * namespace's latest (rolling forward) and snapshots read twice and check the range
 * between the passes for a split transaction.
 *
 * Versions are slots of a table: a create-if-absent fills one. Slot values: 0 empty,
 * 1 the first version, RES+T a reservation of transaction T, CHG+T its change, SGL+W a
 * single-table writer's version. The transaction processes crash at every step
 * (nondeterministically stop), the writers may lose any race.
 *
 * Checked (spin -a; gcc -DSAFETY; ./pan): a committed transaction's version is never
 * taken by anyone else (publish asserts), every snapshot contains each transaction in
 * both tables or in neither, and in the end (after a last roll-forward) a committed
 * transaction is in both tables, any other in neither, and every acknowledged
 * single-table write is there. Builds that must fail: -DNO_SETTLE (writers ignore
 * markers: a committed transaction's version is stolen), -DONE_PASS (a snapshot without
 * its second pass: split), -DPUBLISH_FIRST (a transaction publishes before its decision:
 * an aborted one becomes visible).
 */

#define NTAB 2
#define MAXV 7
#define RES 10
#define CHG 20
#define SGL 30
#define UNDEC 0
#define COMMITTED 1
#define ABORTED 2
#ifndef NTX
#define NTX 1
#endif

byte slot[NTAB * MAXV];
byte dec[NTX + 1];            /* decision of transaction 1..NTX */
byte resv[(NTX + 1) * NTAB];  /* the reservation version of T on table t (0: none) */
bool acked[3];                /* single-table writer W's write acknowledged */
byte ackv[3];                 /* ... at this version of table 0 */

#define S(t, v) slot[(t) * MAXV + (v)]
#define R(T, t) resv[(T) * NTAB + (t)]
#define CRASH if :: true -> goto done :: true -> skip fi

/* the latest version of table t (creates are contiguous) */
inline top(t, out) {
    out = 1;
    do
    :: out + 1 < MAXV && S(t, out + 1) != 0 -> out++
    :: else -> break
    od
}

/* the marker of version v of table t: the last reservation at or below it */
inline marker(t, v, out) {
    out = 0;
    k = v;
    do
    :: k > 0 && S(t, k) > RES && S(t, k) < CHG -> out = S(t, k) - RES; break
    :: k > 0 && !(S(t, k) > RES && S(t, k) < CHG) -> k--
    :: k == 0 -> break
    od
}

/* publish T's change on table t (anyone may; the same bytes are success) */
inline publish(T, t) {
    atomic {
        if
        :: S(t, R(T, t) + 1) == 0 -> S(t, R(T, t) + 1) = CHG + T
        :: else -> assert(S(t, R(T, t) + 1) == CHG + T)
        fi
    }
}

/* settle the marker m of the version below n on table t; lost = the slot is T's */
inline settle(t, n, m, own, lost) {
    lost = false;
#ifndef NO_SETTLE
    if
    :: m != 0 && m != own ->
        if
        :: dec[m] != UNDEC -> skip                                  /* decided: go on */
        :: atomic { dec[m] == UNDEC -> dec[m] = ABORTED }           /* abort_after */
        fi;
        if
        :: dec[m] == COMMITTED && R(m, t) + 1 == n -> publish(m, t); lost = true
        :: else -> skip
        fi
    :: else -> skip
    fi
#endif
}

/* create version n of table t with value val if the slot is free */
inline create(t, n, val, ok) {
    atomic {
        if
        :: n < MAXV && S(t, n) == 0 -> S(t, n) = val; ok = true
        :: else -> ok = false
        fi
    }
}

/* the namespace's latest version of table t, rolled forward */
inline latest(t, out) {
    top(t, out);
    marker(t, out, m2);
    if
    :: m2 != 0 && dec[m2] == COMMITTED && R(m2, t) == out -> publish(m2, t); out++
    :: else -> skip
    fi
}

proctype Transaction(byte T; byte first) {
    byte t, i, n, m, k, m2;
    bool ok, lost;
    for (i : 0 .. NTAB - 1) {
        t = (first + i) % NTAB;
        CRASH;
        do  /* reserve: a writer's create, settling the marker below */
        :: top(t, n);
           marker(t, n, m);
           settle(t, n + 1, m, T, lost);
           if
           :: !lost -> create(t, n + 1, RES + T, ok);
                       if :: ok -> R(T, t) = n + 1; break :: else -> skip fi
           :: else -> skip
           fi
        :: n + 1 >= MAXV - 1 -> goto done  /* out of model versions */
        od;
        CRASH  /* staged: nothing visible */
    }
#ifdef PUBLISH_FIRST
    publish(T, 0);
#endif
    atomic {  /* the commit point */
        if
        :: dec[T] == UNDEC -> dec[T] = COMMITTED
        :: else -> skip
        fi
    }
    if :: dec[T] != COMMITTED -> goto done :: else -> skip fi;
    for (i : 0 .. NTAB - 1) {
        CRASH;
        publish(T, i)
    }
done:
    skip
}

proctype Writer(byte W; byte t) {
    byte n, m, k, tries;
    bool ok, lost;
    do
    :: tries < 4 ->
        tries++;
        top(t, n);
        marker(t, n, m);
        settle(t, n + 1, m, 0, lost);
        if
        :: !lost -> create(t, n + 1, SGL + W, ok);
                    if :: ok -> acked[W] = true; ackv[W] = n + 1; break :: else -> skip fi
        :: else -> skip
        fi
    :: else -> break
    od
}

/* T is in table t at or below version v */
inline included(T, t, v, out) {
    out = false;
    k = 1;
    do
    :: k <= v && S(t, k) == CHG + T -> out = true; break
    :: k <= v && S(t, k) != CHG + T -> k++
    :: k > v -> break
    od
}

proctype Reader() {
    byte a0, a1, b0, b1, m2, k, T, passes, w;
    bool split, in0, in1;
    do
    :: passes < 3 ->
        passes++;
        latest(0, a0);
        latest(1, a1);
#ifdef ONE_PASS
        b0 = a0; b1 = a1;
#else
        latest(0, b0);
        latest(1, b1);
#endif
        split = false;
        for (T : 1 .. NTX) {  /* a change in (a, b] whose other table a already shows */
            included(T, 0, b0, in0);
            included(T, 0, a0, in1);
            if :: in0 && !in1 && R(T, 1) + 1 <= a1 && S(1, R(T, 1) + 1) == CHG + T -> split = true
               :: else -> skip fi;
            included(T, 1, b1, in0);
            included(T, 1, a1, in1);
            if :: in0 && !in1 && R(T, 0) + 1 <= a0 && S(0, R(T, 0) + 1) == CHG + T -> split = true
               :: else -> skip fi
        }
        if
        :: !split ->
            for (T : 1 .. NTX) {
                included(T, 0, a0, in0);
                included(T, 1, a1, in1);
                assert(in0 == in1)  /* the snapshot never splits a transaction */
            }
            break
        :: else -> skip
        fi
    :: else -> break
    od
}

init {
    byte T, t, v, m2, k;
    bool in0, in1;
    S(0, 1) = 1;
    S(1, 1) = 1;
    atomic {
        run Transaction(1, 0);
#if NTX > 1
        run Transaction(2, 1);
#endif
        run Writer(1, 0);
        run Reader()
    }
    (_nr_pr == 1);
    for (t : 0 .. NTAB - 1) { latest(t, v) }
    for (T : 1 .. NTX) {
        included(T, 0, MAXV - 1, in0);
        included(T, 1, MAXV - 1, in1);
        assert(in0 == in1);
        assert(in0 == (dec[T] == COMMITTED))
    }
    assert(!acked[1] || S(0, ackv[1]) == SGL + 1)  /* no acknowledged write lost */
}
