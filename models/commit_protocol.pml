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
 *   0. list the latest version (its floor: no version at or above it is removed), put up
 *      its marker;
 *   1. read the leases (S: the live ones, and the oldest leased version);
 *   2. list the versions and decide which data files are orphans (no manifest names them);
 *   3. remove the manifests of versions older than the latest, the floor and the oldest
 *      lease;
 *   4. read the leases again (R): it may delete no orphan while a live writer's lease it
 *      read in step 1, or one that recorded its marker, is live; take the marker down;
 *   5. list the versions again: a version that landed since step 2 references its files;
 *   6. delete the orphans (orphan retention 0: worst case), if nothing blocked it.
 * A writer writes its lease on the version it read, then looks for a marker: with one up it
 * records it in its lease and, if its version is below the marker's floor, moves its lease
 * to the latest; it never waits. It re-checks its version is there (re-plans if not),
 * writes its data file, checks its lease right before its create (one step with it) and
 * releases the lease. A lease may expire at any moment (its holder stalled past its ttl):
 * from then on cleanup ignores it, and the check before the create refuses the commit.
 * A commit that finds a version it must check removed gets HistoryUnavailableError (it
 * neither lands nor claims anything). Checked besides the above: every file every kept
 * version references exists ("lost file"), and a writer with a live lease never finds its
 * history removed. -DNO_LEASES drops the leases (spin finds the lost file); -DNO_RELIST
 * drops step 5 (the file of a writer that committed and released its lease in the middle
 * of a cleanup); -DNO_NOTE drops the recorded marker (the file of a writer that took its
 * lease after step 1 and wrote it before step 2); -DNO_CHECK drops the check before the
 * create (the file of a writer whose lease expired); -DNO_FLOOR drops the floor (a leased
 * writer whose version, read before the marker went up, a cleanup that missed its lease
 * removed).
 *
 * With -DGUARDED the model is the guarded create of an object-store commit instead (a
 * section of its own at the end of this file); with -DOFFERS it is the offers protocol
 * (the last section).
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

#if !defined(GUARDED) && !defined(OFFERS)
byte manifest[MAXV + 1];   /* manifest[v] = uuid of the transaction at version v, 0 = none */
byte acked[NW];            /* version a writer was told its commit landed at, 0 = none */
bool failed[NW];           /* writer was told its commit did not land */
byte finished = 0;
#ifdef CLEANER
bool removed[MAXV + 1];    /* manifest of that version deleted by the cleaner */
bool datafile[NW];         /* the writer's data file exists */
byte lease[NW];            /* version + 1 the writer's lease pins, 0 = none */
bool expired[NW];          /* the lease ran out (its holder stalled past its ttl) */
byte noted[NW];            /* the cleaner pass whose marker the lease recorded, 0 = none */
byte marker = 0;           /* the pass whose marker is up, 0 = none */
byte floor_v = 0;          /* the marker's floor */
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
  atomic { lease[me] = read_version + 1; expired[me] = false; noted[me] = 0 };
  atomic {                                      /* list the markers (never wait) */
    if
    :: marker != 0 ->
#ifndef NO_NOTE
         noted[me] = marker;
#endif
#ifndef NO_FLOOR
         if
         :: read_version < floor_v -> latest_version(read_version); lease[me] = read_version + 1
         :: else -> skip
         fi
#else
         skip
#endif
    :: else -> skip
    fi
  };
  if                                            /* re-check after writing the lease */
  :: removed[read_version] -> lease[me] = 0; goto plan
  :: else -> skip
  fi;
#endif
  datafile[me] = true;
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
            :: lease[me] != 0 && !expired[me] -> leased_lost_history = true
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
  /* step 2: create-if-absent, possibly with a lost or failed response (with a cleaner:
   * the lease check before the create is one step with it) */
#if defined(CLEANER) && !defined(NO_LEASES) && !defined(NO_CHECK)
  if
  :: expired[me] -> failed[me] = true; goto done
  :: else -> skip
  fi;
#endif
  atomic {
#if defined(CLEANER) && !defined(NO_LEASES) && !defined(NO_CHECK)
    if
    :: expired[me] -> failed[me] = true; goto done
    :: else -> skip
    fi;
#endif
    landed = (manifest[target] == 0);
    if
    :: landed -> manifest[target] = uuid
    :: else -> skip
    fi
  };
  if
  :: landed -> acked[me] = target; goto done           /* response arrives */
  :: !landed -> goto retry                              /* "already exists" */
#ifndef RELIABLE
  :: landed -> goto settle                              /* response lost after the write */
  :: !landed -> goto settle                             /* write failed, or lost "exists" */
#endif
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
  byte pass, w, v, latest, again, oldest, l, fl;
  bool orphan[NW];
  bool seen[NW];
  bool blocked;
  for (pass : 1 .. CLEANS) {
    /* 0. the floor, then the marker */
    latest_version(fl);
    atomic { floor_v = fl; marker = pass };
    /* 1. leases (S) */
    oldest = 255;
    for (w : 0 .. NW - 1) {
      atomic {
        l = lease[w];                            /* one read of each lease object */
        seen[w] = (l != 0 && !expired[w]);
        if
        :: seen[w] && l - 1 < oldest -> oldest = l - 1
        :: else -> skip
        fi
      }
    }
    /* 2. versions and orphans (each data file is listed at its own moment) */
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
#ifndef NO_FLOOR
      :: v < latest && v < oldest && v < fl -> removed[v] = true
#else
      :: v < latest && v < oldest -> removed[v] = true
#endif
      :: else -> skip
      fi
    }
    /* 4. leases again (R): a live writer's lease read in step 1, or one that recorded this
     *    marker, blocks the orphan deletes; then the marker comes down */
    blocked = false;
    for (w : 0 .. NW - 1) {
      atomic {
        if
        :: lease[w] != 0 && !expired[w] && (seen[w] || noted[w] == pass) -> blocked = true
        :: else -> skip
        fi
      }
    }
    marker = 0;
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
    /* 6. orphans, unless a writer may still commit one */
    for (w : 0 .. NW - 1) {
      if
      :: orphan[w] && !blocked -> datafile[w] = false
      :: else -> skip
      fi
    }
  }
  cleaner_done = true
}

/* a holder stalls past its ttl at any moment: its lease expires (once per writer, for the
 * first EXPIRING writers; the writers are symmetric, so one stalling beside one that does
 * not covers what a stall does to the others) */
#ifndef EXPIRING
#define EXPIRING 1
#endif
proctype Expiry() {
  byte w;
  for (w : 0 .. EXPIRING - 1) {
    if
    :: lease[w] != 0 -> expired[w] = true
    :: true -> skip
    fi
  }
}
#endif

init {
  byte i;
  atomic {
#ifdef CLEANER
    manifest[1] = SEED;
    run Cleaner();
    run Expiry();
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
#endif

#ifdef GUARDED
/*
 * The guarded create (-DGUARDED; the builds above are left out): what a commit on an
 * object store does since the guard listing (txn_engine/commit.py, _land/_check_guarded).
 *
 * Versions are slots that a cleanup frees and a create-if-absent can fill again, so each
 * manifest is a content (an id, in creation order) recording its transaction (uuid) and
 * the content it was built on (parent). Version 1 exists first. Beside NW guarded writers,
 * APPENDS other commits land (each lists and creates the next version on the latest in
 * one step: correct writers, checked only for not being lost) and a cleaner removes up to
 * CLEANS non-latest versions, one at a time, each at any moment:
 *   default      it keeps every version at/after the oldest lease; a writer leases the
 *                version it reads in the same step (what the marker protocol checked by
 *                -DCLEANER guarantees) and holds it until it has its answer;
 *   -DNO_LEASES  it ignores leases: any non-latest version;
 *   -DAGED       (with -DNO_LEASES) but never a version created after a create still in
 *                flight began (from its guard listing to its decision): no cleanup of a
 *                version younger than one round trip.
 * A guarded writer reads the latest version, its base, in one step that spin places
 * anywhere: the create comes right after it ("just read") or after other versions landed
 * and others were removed (stale). It commits one transaction:
 *   1. first attempt (a writer holding a Dataset): base + 1, no listing; later attempts
 *      list: a version after the last one checked that carries its uuid is an earlier
 *      attempt that landed (answer: landed there); a missing one (or the base, while
 *      checking from it) is HistoryUnavailableError; else it plans on the latest;
 *   2. the guard listing and the create-if-absent are two separate steps in either order
 *      (a failed listing is taken again); the create's response may be lost, and the writer reads
 *      the version back: its manifest (landed), another's (lost the race), or nothing / a
 *      failed read (CommitStateUnknownError: the caller commits the same transaction
 *      again, i.e. step 1's listing from the base; commit.py first offers the same bytes
 *      again when nothing is there, which the model leaves out);
 *   3. lost the race: step 1 (a fresh listing; commit.py reuses the guard listing when it
 *      already shows the winner). Landed: the guard listing decides: (b) its latest is
 *      target - 1: accepted; (a2) versions above the target but not target + 1: withdrawn;
 *      else ((c), (a1)) the lineage check: target + 1 absent (existence check), or gone
 *      when read (a second request): accepted if the listing showed nothing above ours,
 *      else withdrawn; built on ours: accepted; else withdrawn. (A failed guard listing
 *      is taken again after the create, so in the model the listing does not fail.) Withdrawn: the writer deletes its manifest's path
 *      (whatever is there by then) and answers HistoryUnavailableError.
 * -DLIST_AFTER: the listing is always taken after the create (local disk, a Dataset base
 * without assume_latest: _direct_attempt with list_after), and a landed create whose
 * listing shows nothing above it is accepted without the existence check (commit.py's
 * _check_guarded(after=True)).
 * Mutations and variants: -DNO_GUARD accepts every landed create (assume_latest without
 * the HEAD); -DHEAD_ONLY always runs the lineage check and never lists (assume_latest as
 * it was); -DRELIABLE: no lost responses. Two behaviours of commit.py that spin showed are
 * needed against a lease-ignoring cleaner that deletes only old versions (-DAGED), each
 * with a build that removes it (what the first guarded commit.py did):
 *   when the guard listing showed versions above ours, target + 1 found absent (or gone
 *   again) is taken as removed by a cleanup: withdrawn, not accepted (-DGONE_ACCEPT:
 *   accepted);
 *   a failed guard listing is taken again after the create, so the guard listing never
 *   fails in the model (-DLISTING_FALLBACK: it may fail, and the existence check alone
 *   decides).
 * Checked when everything has finished, following parents down from the latest version:
 * every acknowledged commit (the writers' and the other commits') is in that lineage
 * ("lost_ack"); no uuid is in it twice (exactly once); a writer answered "failed" or
 * "unavailable" is not in it; every writer got an answer.
 */
#ifndef APPENDS
#define APPENDS 1
#endif
#define GV (1 + APPENDS + NW * MAXATT)   /* bound on versions and on manifest contents */

byte cid[GV + 2];        /* cid[v] = content at version v, 0 = none */
byte cu[GV + 1];         /* content c: its transaction's uuid */
byte cp[GV + 1];         /* content c: the content it was built on (0 = none) */
byte nextid = 0;         /* contents are numbered in creation order */
byte ackc[NW + APPENDS]; /* content acknowledged to writer w (other commit NW + k), 0 = none */
bool failed[NW];         /* attempts exhausted: told nothing landed */
bool unavailable[NW];    /* HistoryUnavailableError (withdrawn, or history missing) */
byte lease[NW];          /* version + 1 the writer's lease pins, 0 = none */
byte fstart[NW];         /* -DAGED: first content id younger than the writer's create */
byte finished = 0;
bool cleaner_done = false;

inline latest_present(r) {
  r = GV;
  do
  :: r > 0 && cid[r] == 0 -> r--
  :: else -> break
  od
}

inline create_content(ver, u, parent, out) {
  nextid++;
  cu[nextid] = u;
  cp[nextid] = parent;
  cid[ver] = nextid;
  out = nextid
}

inline guard_listing() {
  atomic { latest_present(gl_latest); gl_t1 = (cid[t + 1] != 0); gl_ok = true; listed = true }
}

proctype GWriter(byte me) {
  byte uuid = me + 1;
  byte base, checked, t, mine, pc, att = 0, v, c, gl_latest;
  bool landed, listed, gl_ok, gl_t1, shown;

  atomic { latest_present(base); pc = cid[base]; lease[me] = base + 1 };
  checked = base;
  t = base + 1;
  goto attempt;                                     /* first attempt: no listing */

again:                                              /* a new call, same transaction */
  checked = base;
relist:
  atomic {
    latest_present(c);
    if
    :: c < checked -> unavailable[me] = true; goto done
    :: else -> skip
    fi;
    v = checked + 1;                                /* did an earlier attempt land? */
    do
    :: v <= c && cid[v] != 0 && cu[cid[v]] == uuid -> ackc[me] = cid[v]; goto done
    :: v <= c && !(cid[v] != 0 && cu[cid[v]] == uuid) -> v++
    :: v > c -> break
    od;
    v = checked + 1;                                /* is every version to check there? */
    if
    :: checked == base -> v = base
    :: else -> skip
    fi;
    do
    :: v <= c && cid[v] == 0 -> unavailable[me] = true; goto done
    :: v <= c && cid[v] != 0 -> v++
    :: v > c -> break
    od;
    pc = cid[c];                                    /* plan against the latest */
    checked = c;
    t = c + 1;
    v = 0;
    c = 0
  };

attempt:
  if
  :: att >= MAXATT || t > GV -> failed[me] = true; goto done
  :: else -> att++
  fi;
  mine = 0;
  listed = false;
#ifdef AGED
  fstart[me] = nextid + 1;
#endif
#if !defined(NO_GUARD) && !defined(HEAD_ONLY) && !defined(LIST_AFTER)
  if
  :: guard_listing()                                /* the listing answers first */
  :: skip                                           /* the create first */
  fi;
#endif
  atomic {                                          /* create-if-absent */
    landed = (cid[t] == 0);
    if
    :: landed -> create_content(t, uuid, pc, mine)
    :: else -> skip
    fi
  };
#if !defined(NO_GUARD) && !defined(HEAD_ONLY)
  if
  :: !listed -> guard_listing()                     /* the listing after the create */
#ifdef LISTING_FALLBACK
  :: !listed -> gl_ok = false; listed = true        /* the listing failed */
#endif
  :: true -> skip                                   /* later (after the read-back) */
  fi;
#endif
  if
  :: landed -> goto check                           /* response arrives */
  :: !landed -> goto lost                           /* "already exists" */
#ifndef RELIABLE
  :: true -> skip                                   /* response lost: read back */
#endif
  fi;
  if
  :: mine != 0 && cid[t] == mine -> goto check      /* ours is there */
  :: cid[t] != 0 && cid[t] != mine -> goto lost     /* another writer's */
  :: true ->                                        /* nothing, or the read failed */
#ifdef AGED
       fstart[me] = 0;
#endif
       goto again
  fi;
lost:
#ifdef AGED
  fstart[me] = 0;
#endif
  goto relist;

check:
#if !defined(NO_GUARD) && !defined(HEAD_ONLY)
  if
  :: !listed -> guard_listing()
  :: else -> skip
  fi;
  if
#ifdef LIST_AFTER
  :: gl_ok && gl_latest == t -> goto accept         /* after ours landed: none above */
#endif
  :: gl_ok && gl_latest == t - 1 -> goto accept     /* (b) */
  :: gl_ok && gl_latest > t && !gl_t1 -> goto withdraw  /* (a2) */
  :: else -> skip                                   /* (c), (a1), no listing */
  fi;
#ifndef GONE_ACCEPT
  shown = (gl_ok && gl_latest > t);                 /* the listing showed versions above */
#endif
  gl_latest = 0;
  gl_t1 = false;
  gl_ok = false;
#endif
#ifndef NO_GUARD
  if                                                /* existence check of t + 1 */
#ifndef GONE_ACCEPT
  :: cid[t + 1] == 0 && shown -> goto withdraw
  :: cid[t + 1] == 0 && !shown -> goto accept
#else
  :: cid[t + 1] == 0 -> goto accept
#endif
  :: else -> skip
  fi;
  atomic {                                          /* read it: built on ours? */
    c = cid[t + 1];
    if
#ifndef GONE_ACCEPT
    :: c == 0 && !shown -> goto accept
    :: c == 0 && shown -> skip                      /* removed since the listing */
#else
    :: c == 0 -> goto accept                        /* gone again */
#endif
    :: c != 0 && cp[c] == mine -> goto accept
    :: else -> c = 0
    fi
  };
withdraw:
  cid[t] = 0;                                       /* delete our manifest's path */
  unavailable[me] = true;
  goto done;
#endif
accept:
  ackc[me] = mine;
done:
#ifdef AGED
  fstart[me] = 0;
#endif
  lease[me] = 0;
  atomic {
    finished++;
    base = 0; checked = 0; t = 0; mine = 0; pc = 0; att = 0; v = 0; c = 0; gl_latest = 0;
    landed = false; listed = false; gl_ok = false; gl_t1 = false; shown = false
  }
}

proctype Others() {
  byte k, l, c;
  for (k : 0 .. APPENDS - 1) {
    atomic {
      latest_present(l);
      if
      :: l < GV -> create_content(l + 1, SEED + 1 + k, cid[l], c); ackc[NW + k] = c
      :: else -> skip
      fi;
      l = 0;
      c = 0
    }
  }
  atomic { finished++ }
}

proctype GCleaner() {
  byte n, v, l, oldest, w;
  bool ok;
  for (n : 1 .. CLEANS) {
    atomic {
      latest_present(l);
      oldest = 255;
#ifndef NO_LEASES
      for (w : 0 .. NW - 1) {
        if
        :: lease[w] != 0 && lease[w] - 1 < oldest -> oldest = lease[w] - 1
        :: else -> skip
        fi
      }
#endif
      v = 1;
      do
      :: v < l && v < oldest && cid[v] != 0 ->
           ok = true;
#ifdef AGED
           for (w : 0 .. NW - 1) {
             if
             :: fstart[w] != 0 && cid[v] >= fstart[w] -> ok = false
             :: else -> skip
             fi
           }
#endif
           if
           :: ok -> cid[v] = 0; break               /* remove this one */
           :: else -> v++                           /* too young */
           fi
      :: v < l -> v++
      :: else -> break
      od;
      v = 0;
      l = 0;
      oldest = 0;
      ok = false
    }
  }
  cleaner_done = true
}

init {
  byte i, c;
  atomic {
    create_content(1, SEED, 0, c);
    run GCleaner();
    run Others();
    for (i : 0 .. NW - 1) { run GWriter(i) }
  }
  (finished == NW + 1 && cleaner_done);
  /* the checks: follow parents down from the latest version */
  bool onchain[GV + 1];
  byte l, w, count;
  latest_present(l);
  c = cid[l];
  do
  :: c != 0 -> onchain[c] = true; c = cp[c]
  :: else -> break
  od;
  for (w : 0 .. NW + APPENDS - 1) {
    bool lost_ack = (ackc[w] != 0 && !onchain[ackc[w]]);
    assert(!lost_ack)
  }
  for (w : 0 .. NW - 1) {
    count = 0;
    for (c : 1 .. GV) {
      if
      :: onchain[c] && cu[c] == w + 1 -> count++
      :: else -> skip
      fi
    }
#ifndef LOST_ACK_ONLY
    assert(count <= 1);                                     /* exactly once */
    assert(!(failed[w] || unavailable[w]) || count == 0);   /* failure is true */
#endif
    assert(ackc[w] != 0 || failed[w] || unavailable[w]);    /* every writer gets an answer */
  }
}
#endif

#ifdef OFFERS
/*
 * Offers (-DOFFERS; the builds above are left out): txn_engine/offers.py and the offer rules
 * of txn_engine/commit.py. NW writers each commit one Append; version 1 exists first and
 * versions are created one after another by create-if-absent (no cleaner: the guarded
 * section checks that part). A version records the set of writers it carries (its own
 * writer's transaction and the offers it carried), and who created it. A writer:
 *   0. with -DEARLY (writer 0 only, to keep the state space small), may offer itself
 *      before its first attempt (read version 1, window WINDOW versions more): an early
 *      offer, made by a process that saw contention on the table recently;
 *   1. lists the versions; one after the last version it checked that carries it is its
 *      answer ("landed there": its own create, or another writer's carrier);
 *   2. if its attempts are spent it gives up ("failed"), unless its offer may still land:
 *      the window of its offer (the last version it may land in) is above the latest
 *      version it has checked; then it goes on (-DNO_WAIT: it gives up anyway);
 *   3. reads the offers directory (each offer there is read or not, at its own moment, and
 *      what it read stays in hand: a withdrawn offer may still be carried);
 *   4. carries any offer in hand whose window reaches the version it creates and that no
 *      version after the offer's read version carries (-DNO_CARRIED_CHECK: without that
 *      check; -DNO_WINDOW_CHECK: without the window); it may also leave any out;
 *   5. creates latest + 1 carrying them; the response may be lost: it reads the version
 *      back (its own create: landed; another's or nothing: lost), and that read may fail
 *      (CommitStateUnknownError: the caller commits the same transaction again, and the
 *      offer stays in the directory, so that the new call knows its window);
 *   6. lost: offers itself once (read version: the version it built on; window: WINDOW
 *      versions more) and goes to 1.
 * When it has its answer it withdraws its offer. Checked when all have finished: no writer
 * is carried by two versions, an acknowledged writer is carried by the version it was
 * told, a writer told "failed" is carried by none, every writer has an answer.
 */
#ifndef WINDOW
#define WINDOW 2
#endif
#define OV (NW + 2)             /* at most one version per writer after version 1 */
#define SEEDBIT 128             /* version 1's transaction (not a writer) */

byte om[OV + 2];        /* om[v]: bitmask of the writers version v carries; 0 = no version */
byte ocr[OV + 2];       /* ocr[v]: the writer (+1) that created version v */
bool posted[NW];        /* writer w's offer is in the offers directory */
byte oc[NW];            /* its read version (the version it was checked up to) */
byte ow[NW];            /* its window: the last version it may land in */
byte acked[NW];         /* version writer w was told it landed in, 0 = none */
bool failed[NW];        /* writer w was told it did not land */
byte finished = 0;

inline olatest(r) {
  r = 1;
  do
  :: r < OV && om[r + 1] != 0 -> r++
  :: else -> break
  od
}

proctype OWriter(byte me) {
  byte mine = 1 << me;
  byte checked = 1, latest, target, carry, v, w, att = 0, known = 0;
  byte kc[NW];
  byte kw[NW];
  bool landed, offered = false, clean;

#ifdef EARLY
  if                                                /* 0. an early offer (writer 0), or none */
  :: me == 0 -> atomic { oc[me] = checked; ow[me] = checked + WINDOW; posted[me] = true };
                offered = true
  :: skip
  fi;
#endif
retry:
  olatest(latest);
  v = checked + 1;                                  /* 1. carried since the last check? */
  do
  :: v <= latest && (om[v] & mine) != 0 -> acked[me] = v; goto done
  :: v <= latest && (om[v] & mine) == 0 -> v++
  :: v > latest -> break
  od;
  checked = latest;
  if                                                /* 2. give up only when no offer can land */
  :: att >= MAXATT || latest >= OV ->
       if
#ifndef NO_WAIT
       :: offered && latest < ow[me] && latest < OV -> skip
#endif
       :: else -> failed[me] = true; goto done
       fi
  :: else -> skip
  fi;
  att++;
  target = latest + 1;
  for (w : 0 .. NW - 1) {                           /* 3. read the offers directory */
    if
    :: w != me && posted[w] -> atomic { known = known | (1 << w); kc[w] = oc[w]; kw[w] = ow[w] }
    :: true -> skip
    fi
  }
  carry = 0;                                        /* 4. what to carry */
  for (w : 0 .. NW - 1) {
    if
#ifdef NO_WINDOW_CHECK
    :: (known & (1 << w)) != 0 && kc[w] <= latest ->
#else
    :: (known & (1 << w)) != 0 && kw[w] >= target && kc[w] <= latest ->
#endif
         clean = true;
#ifndef NO_CARRIED_CHECK
         v = kc[w] + 1;
         do
         :: v <= latest && (om[v] & (1 << w)) != 0 -> clean = false; break
         :: v <= latest && (om[v] & (1 << w)) == 0 -> v++
         :: v > latest -> break
         od;
#endif
         if
         :: clean -> carry = carry | (1 << w)
         :: clean -> skip                            /* left out (cap, not read in time) */
         :: !clean -> known = known & ~(1 << w)      /* landed already: never again */
         fi
    :: else -> skip
    fi
  }
  atomic {                                          /* 5. create-if-absent */
    landed = (om[target] == 0);
    if
    :: landed -> om[target] = mine | carry; ocr[target] = me + 1
    :: else -> skip
    fi
  };
  if
  :: landed -> acked[me] = target; goto done        /* response arrives */
  :: !landed -> goto lost                           /* "already exists" */
  :: landed -> goto settle                          /* response lost after the write */
  :: !landed -> goto settle                         /* write failed, or "exists" lost */
  fi;
settle:
  if
  :: ocr[target] == me + 1 -> acked[me] = target; goto done
  :: ocr[target] != me + 1 -> goto lost
  :: true -> goto retry                             /* read failed: committed again */
  fi;
lost:
  if                                                /* 6. offer itself, once */
  :: !offered -> atomic { oc[me] = checked; ow[me] = checked + WINDOW; posted[me] = true };
                 offered = true
  :: else -> skip
  fi;
  goto retry;
done:
  posted[me] = false;                               /* withdrawn */
  atomic { finished++ }
}

init {
  byte i;
  atomic {
    om[1] = SEEDBIT;
    ocr[1] = 255;
    for (i : 0 .. NW - 1) { run OWriter(i) }
  }
  (finished == NW);
  byte w, v, count;
  for (w : 0 .. NW - 1) {
    count = 0;
    for (v : 1 .. OV) {
      if
      :: (om[v] & (1 << w)) != 0 -> count++
      :: else -> skip
      fi
    }
    assert(count <= 1);                                          /* exactly once */
    assert(acked[w] == 0 || (om[acked[w]] & (1 << w)) != 0);     /* ack is true */
    assert(!failed[w] || count == 0);                            /* failure is true */
    assert(acked[w] != 0 || failed[w]);                          /* every writer an answer */
  }
}
#endif
