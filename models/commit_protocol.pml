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
 *
 * With -DCLEANER a version 1 exists first, each writer plans against the latest version it
 * reads, writes its data file before committing (an orphan until its version lands), and a
 * cleaner process runs CLEANS passes of txn_engine's cleanup beside the writers, step by
 * step as the implementation does them:
 *   0. put up its marker (lease takers wait while a marker is up);
 *   1. read the leases (the oldest leased version);
 *   2. list the versions and decide which data files are orphans (no manifest names them);
 *   3. remove the manifests of versions older than both the latest and the oldest lease,
 *      then take the marker down;
 *   4. read the leases again (the oldest lease's creation time: files written since are a
 *      holder's and are kept);
 *   5. list the versions again: a version that landed since step 2 references its files;
 *   6. delete the orphan files that are still unprotected (orphan retention 0: worst case).
 * A writer takes a lease on the version it read, waits until no marker is up, re-checks
 * the version is still there (re-plans if not), writes its data file, commits, and
 * releases the lease. A commit that finds a
 * version it must check removed gets HistoryUnavailableError (it neither lands nor claims
 * anything). Checked besides the above: every file every kept version references exists
 * ("lost file"), and a leased writer never finds its history removed. -DNO_LEASES drops
 * the leases (spin finds the lost file); -DNO_RELIST drops step 5 (spin finds the file of a
 * writer that committed and released its lease in the middle of a cleanup); -DNO_MARKER
 * drops the marker (spin finds a leased writer whose history a cleanup that read the
 * leases just before the lease was written removed).
 */

#ifndef NW
#define NW 3
#endif
#ifndef MAXATT
#define MAXATT 3
#endif
#ifndef CLEANS
#define CLEANS 1
#endif
#define MAXV (NW * MAXATT + 2)
#define SEED (NW + 1)           /* uuid of version 1 when the dataset exists beforehand */

byte manifest[MAXV + 1];   /* manifest[v] = uuid of the transaction at version v, 0 = none */
byte acked[NW];            /* version a writer was told its commit landed at, 0 = none */
bool failed[NW];           /* writer was told its commit did not land */
byte finished = 0;
#ifdef CLEANER
bool removed[MAXV + 1];    /* manifest of that version deleted by the cleaner */
bool datafile[NW];         /* the writer's data file exists */
byte lease[NW];            /* version + 1 the writer's lease pins, 0 = none */
byte lease_epoch[NW];      /* when the lease was created (logical clock) */
byte file_epoch[NW];       /* when the data file was written */
byte clock = 0;
bool marker = false;       /* a cleanup is deleting manifests */
bool unavailable[NW];      /* the commit got HistoryUnavailableError */
bool leased_lost_history = false;
#endif

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

#ifdef CLEANER
plan:
  latest_version(read_version);
#ifndef NO_LEASES
  atomic { clock++; lease_epoch[me] = clock; lease[me] = read_version + 1 };
#ifndef NO_MARKER
  (!marker);                                    /* wait for a running cleanup's deletes */
#endif
  if                                            /* re-check after writing the lease */
  :: removed[read_version] -> lease[me] = 0; goto plan
  :: else -> skip
  fi;
#endif
  atomic { clock++; file_epoch[me] = clock; datafile[me] = true };
#endif

retry:
  latest_version(latest);
#ifndef NO_DEDUP
  /* step 1: did an earlier attempt of ours land? (and, with a cleaner: is every version
   * it must check still there?) */
  v = read_version + 1;
  do
  :: v <= latest ->
       if
#ifdef CLEANER
       :: removed[v] ->
            unavailable[me] = true;
            if
            :: lease[me] != 0 -> leased_lost_history = true
            :: else -> skip
            fi;
            goto done
#endif
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
#ifdef CLEANER
  lease[me] = 0;                                        /* release */
#endif
  atomic { finished++ }
}

#ifdef CLEANER
bool cleaner_done = false;

proctype Cleaner() {
  byte pass, w, v, latest, again, oldest, floor, l, e;
  bool orphan[NW];
  for (pass : 1 .. CLEANS) {
    marker = true;
    /* 1. leases */
    oldest = 255;
    for (w : 0 .. NW - 1) {
      l = lease[w];                              /* one read of each lease object */
      if
      :: l != 0 && l - 1 < oldest -> oldest = l - 1
      :: else -> skip
      fi
    }
    /* 2. versions and orphans (manifests are immutable: reading them is one step; each
     *    data file is listed at its own moment) */
    latest_version(latest);
    for (w : 0 .. NW - 1) {
      atomic {
        orphan[w] = datafile[w];
        for (v : 1 .. latest) {
          if
          :: manifest[v] == w + 1 -> orphan[w] = false
          :: else -> skip
          fi
        }
      }
    }
    /* 3. old manifests, oldest first */
    for (v : 1 .. latest) {
      if
      :: v < latest && v < oldest -> removed[v] = true
      :: else -> skip
      fi
    }
    marker = false;
    /* 4. leases again */
    floor = 255;
    for (w : 0 .. NW - 1) {
      atomic { l = lease[w]; e = lease_epoch[w] };
      if
      :: l != 0 && e < floor -> floor = e
      :: else -> skip
      fi
    }
#ifndef NO_RELIST
    /* 5. versions again: what landed since step 2 keeps its files */
    latest_version(again);
    atomic {
      for (w : 0 .. NW - 1) {
        for (v : 1 .. again) {
          if
          :: manifest[v] == w + 1 -> orphan[w] = false
          :: else -> skip
          fi
        }
      }
    }
#endif
    /* 6. orphans not written since the oldest live lease was taken */
    for (w : 0 .. NW - 1) {
      if
      :: orphan[w] && file_epoch[w] < floor -> datafile[w] = false
      :: else -> skip
      fi
    }
  }
  cleaner_done = true
}
#endif

init {
  byte i;
  atomic {
#ifdef CLEANER
    manifest[1] = SEED;
    run Cleaner();
#endif
    for (i : 0 .. NW - 1) { run Writer(i) }
  }
  (finished == NW);
#ifdef CLEANER
  (cleaner_done);
#endif
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
#ifdef CLEANER
    assert(acked[w] != 0 || failed[w] || unavailable[w]);  /* every writer gets an answer */
    /* lost file: a landed writer's data file is referenced by the latest version (and
     * every kept version after it lands) */
    bool lost_file = (count > 0 && !datafile[w]);
    assert(!lost_file);
#else
    assert(acked[w] != 0 || failed[w]);                    /* every writer gets an answer */
#endif
  }
#ifdef CLEANER
  assert(!leased_lost_history);
#endif
}
