/*
 * txn_engine's commit protocol, as a Promela model checked with spin.
 *
 * NW writers each commit one transaction (uuid = writer id + 1) to a store whose only
 * synchronisation is an atomic create-if-absent of version files. Any write may lose its
 * response (the store applied it, the writer sees an error) or fail before reaching the
 * store. A writer:
 *   1. lists the versions (reads `latest`) and checks whether a version newer than the one
 *      it read already carries its uuid (an earlier attempt landed): then it is done;
 *   2. tries to create version latest+1;
 *   3. on a lost/failed response settles the outcome by reading that version back (a
 *      failed read leaves it unknown: the caller commits the same transaction again);
 *   4. on "already exists" retries, up to MAXATT attempts.
 *
 * Checked: exactly-once (no uuid in two versions), an acknowledged commit is in the
 * version it was acknowledged with, a commit reported failed did not land, no gaps in
 * the version chain. Build with -DNO_DEDUP to drop step 1's uuid check (what Lance does):
 * spin then finds a double commit, which shows the model can fail.
 */

#ifndef NW
#define NW 3
#endif
#ifndef MAXATT
#define MAXATT 3
#endif
#define MAXV (NW * MAXATT + 1)

byte manifest[MAXV + 1];   /* manifest[v] = uuid of the transaction at version v, 0 = none */
byte acked[NW];            /* version a writer was told its commit landed at, 0 = none */
bool failed[NW];           /* writer was told its commit did not land */
byte finished = 0;

inline latest_version(result) {
  result = 0;
  do
  :: result < MAXV && manifest[result + 1] != 0 -> result++
  :: else -> break
  od
}

proctype Writer(byte me) {
  byte uuid = me + 1;
  byte read_version = 0;   /* every writer planned against version 0 */
  byte attempts = 0;
  byte latest, v, target;
  bool landed;

retry:
  latest_version(latest);
#ifndef NO_DEDUP
  /* step 1: did an earlier attempt of ours land? */
  v = read_version + 1;
  do
  :: v <= latest ->
       if
       :: manifest[v] == uuid -> acked[me] = v; goto done
       :: else -> v++
       fi
  :: else -> break
  od
#endif
  if
  :: attempts >= MAXATT || latest >= MAXV -> failed[me] = true; goto done
  :: else -> attempts++
  fi;
  target = latest + 1;
  /* step 2: create-if-absent, possibly with a lost or failed response */
  atomic {
    landed = (manifest[target] == 0);
    if
    :: landed -> manifest[target] = uuid
    :: else -> skip
    fi
  };
  if
  :: landed -> acked[me] = target; goto done           /* response arrives */
  :: !landed -> goto retry                              /* "already exists" */
  :: landed -> goto settle                              /* response lost after the write */
  :: !landed -> goto settle                             /* write failed, or lost "exists" */
  fi;
settle:
  /* step 3: read the target back and compare uuids; that read may fail too, and then
   * the caller gets CommitStateUnknownError and commits the same transaction again */
  if
  :: manifest[target] == uuid -> acked[me] = target; goto done
  :: manifest[target] != uuid -> goto retry
  :: true -> goto retry                                 /* read failed: outcome unknown */
  fi;
done:
  atomic { finished++ }
}

init {
  byte i;
  atomic {
    for (i : 0 .. NW - 1) { run Writer(i) }
  }
  (finished == NW);
  /* the checks */
  byte w, v, count, last;
  last = 0;
  for (v : 1 .. MAXV) {
    if
    :: manifest[v] != 0 -> assert(last == v - 1); last = v   /* no gaps */
    :: else -> skip
    fi
  }
  for (w : 0 .. NW - 1) {
    count = 0;
    for (v : 1 .. MAXV) {
      if
      :: manifest[v] == w + 1 -> count++
      :: else -> skip
      fi
    }
    assert(count <= 1);                                   /* exactly once */
    assert(acked[w] == 0 || manifest[acked[w]] == w + 1); /* ack is true */
    assert(!failed[w] || count == 0);                      /* failure is true */
    assert(acked[w] != 0 || failed[w]);                    /* every writer gets an answer */
  }
}
