"""The object-store benchmarks run end to end (quick: moto only) and the delay proxy delays.

The full run (three emulators, each also behind a 25 ms proxy) is not part of the test suite:
``python -m benchmarks.run --stores all`` (docs/performance.md).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.report import render, targets
from benchmarks.run import main


def seconds(endpoint: str) -> float:
    """Seconds for one GET of moto's own page through ``endpoint``, answer read."""
    start = time.perf_counter()
    with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=30) as response:
        response.read()
    return time.perf_counter() - start


def test_delay_proxy_holds_every_request(
    moto_server: Any, loopback_proxy: Callable[..., Any]
) -> None:
    fast = loopback_proxy(moto_server.endpoint)
    slow = loopback_proxy(moto_server.endpoint, delay=0.2)
    seconds(fast.endpoint)
    assert seconds(slow.endpoint) >= 0.2
    assert len(slow.requests) == 1  # forwarded once, after the delay
    assert min(seconds(fast.endpoint) for _ in range(3)) < 0.2


def test_the_delay_proxy_holds_requests_sent_together_once(
    moto_server: Any, loopback_proxy: Callable[..., Any]
) -> None:
    """Two requests on two connections wait for the delay side by side, not one after the
    other: a contended commit's LIST and PUT cost one round trip, as on a real store. The
    delay is long next to the emulator's own time, so a slow machine keeps the margin."""
    delay = 0.4
    slow = loopback_proxy(moto_server.endpoint, delay=delay)

    seconds(slow.endpoint)  # the emulator is warm
    threads = [threading.Thread(target=seconds, args=(slow.endpoint,)) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert delay <= elapsed < 2 * delay  # one delay, not two
    assert len(slow.requests) == 3


def test_the_proxy_says_nothing_when_a_client_goes_away(
    moto_server: Any, loopback_proxy: Callable[..., Any], capfd: pytest.CaptureFixture[str]
) -> None:
    """A writer process that exits with a request held by the proxy, or with a kept-alive
    connection open, is no error of the proxy: no traceback on stderr (the benchmarks'
    logs stay readable), and the proxy goes on serving."""
    slow = loopback_proxy(moto_server.endpoint, delay=0.2)
    host, port = slow.endpoint.rsplit("/", 1)[1].split(":")
    for k in range(1, 4):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"GET /moto-api/ HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 5
        while len(slow.requests) < k and time.monotonic() < deadline:
            time.sleep(0.005)  # the proxy has read it and holds it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, before the held response is written
    time.sleep(0.5)
    with urllib.request.urlopen(f"{slow.endpoint}/moto-api/", timeout=30) as response:
        assert response.status == 200
    assert len(slow.requests) == 4
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "Exception occurred" not in err


def test_quick_object_store_benchmark_through_benchmarks_run(tmp_path: Path) -> None:
    assert main(["--quick", "--stores", "s3", "--delay-ms", "25", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "object_stores.json").read_text())
    assert [s["store"] for s in results["stores"]] == ["s3", "s3+25ms"]
    direct, delayed = results["stores"]
    # every request through the delayed proxy waits 25 ms: so does the conditional PUT
    assert delayed["floor"]["put_if_absent_ms"] >= 25
    assert 0 < direct["floor"]["put_if_absent_ms"] < delayed["floor"]["put_if_absent_ms"]
    # two requests sent together wait for the delay (once, not twice: the proxy test above)
    assert delayed["floor"]["together_ms"] >= 25
    assert {(r["fragments"], r["mode"]) for r in direct["append_latency"]} == {
        (10, "cold"),
        (10, "warm"),
    }
    for row in direct["append_latency"]:
        assert row["pylance_ms"] > 0
        assert row["txn_engine_ms"] > 0
        # the same-size floor: a create-if-absent of as many bytes as the table's manifest
        assert row["manifest_bytes"] > 100
        assert 0 < row["floor_same_size_ms"] < row["txn_engine_ms"] * 10
        assert row["same_size_floor_ratio"] == row["txn_engine_ms"] / row["floor_same_size_ms"]
    for row in direct["contention"]:
        for engine in ("pylance", "txn_engine"):
            assert row[engine]["commits"] == 2 * row["processes"]
            assert row[engine]["failures"] == 0
            assert row[engine]["unaccounted"] == 0  # every acknowledged commit landed once
    threads = direct["threads"]
    assert threads["txn_engine"]["commits"] == threads["threads"] * 2
    assert threads["txn_engine"]["unaccounted"] == 0
    assert (tmp_path / "object_store_s3.png").stat().st_size > 1000
    table = render(results)
    assert "#### s3+25ms" in table
    assert "| 10 | warm |" in table
    assert targets(direct)  # each cell is checked against a stated target


def test_rendezvous_lab_accounts_for_every_commit(tmp_path: Path) -> None:
    from benchmarks.rendezvous_lab import main as lab_main

    args = ["--store", "s3", "--delay-ms", "5", "--writers", "2", "--commits", "2"]
    modes = ["--modes", "carrier,seen,default,racing"]
    assert lab_main([*args, *modes, "--runs", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "rendezvous_lab.json").read_text())
    carried, racing = rows[0], rows[3]
    assert [r["mode"] for r in rows] == ["carrier", "seen", "default", "racing"]
    for row in rows:
        assert row["store"] == "s3+5ms"
        assert row["commits"] == 4
        assert row["failures"] == 0
        assert row["unaccounted"] == 0  # fragments added = acknowledged commits
        assert row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
        assert 0 <= row["carrier_versions"] <= row["versions"]  # read from the table
        # the per-writer latencies are the very samples behind the percentiles (unrounded):
        # a percentile taken from them never exceeds max_ms
        per_writer = row["latencies_ms"]
        assert sum(len(lat) for lat in per_writer) == row["commits"]
        assert max(x for lat in per_writer for x in lat) == row["max_ms"]
    assert racing["carrier_versions"] == 0  # none started, none hosted
    assert carried["carrier_versions"] >= 1
    # hosted: a carrier thread in one of the two writer processes
    assert (
        lab_main(
            [*args, "--runs", "1", "--modes", "hosted", "--hosts", "1", "--out", str(tmp_path)]
        )
        == 0
    )
    (hosted,) = json.loads((tmp_path / "rendezvous_lab.json").read_text())
    assert (hosted["mode"], hosted["hosts"], hosted["commits"]) == ("hosted", 1, 4)
    assert hosted["failures"] == hosted["unaccounted"] == 0
    assert 1 <= hosted["carrier_versions"] <= hosted["versions"]


def test_the_carrier_schedule_runs_a_carrier_the_writers_wait_for(tmp_path: Path) -> None:
    """``--compare-backoff``'s ``carrier`` row: a txn_engine.Carrier in the benchmark's
    process, writers in the default policy (told nothing): they see its beacon and wait for
    it instead of racing, and every commit is accounted for."""
    from benchmarks import object_stores as ob

    with ob.started_stores(["s3"], 5.0, tmp_path) as stores:
        (row,) = ob.contention(
            stores[-1], [2], 3, 1, (False,), engines=("txn_engine",), policy="carrier"
        )
    cell = row["txn_engine"]
    assert row["policy"] == "carrier"
    assert cell["commits"] == 6
    assert cell["failures"] == 0
    assert cell["unaccounted"] == 0
    assert cell["attempts_per_commit"] < 1  # creates per commit: the carrier made them


def test_the_tail_plot_draws_the_default_beside_the_carrier(tmp_path: Path) -> None:
    from benchmarks.object_stores import plot_tail

    def row(policy: str, n: int, rv: str, p50: float, p99: float) -> dict[str, Any]:
        cell = {"p50_ms": p50, "p99_ms": p99}
        return {"policy": policy, "processes": n, "read_version": rv, "txn_engine": cell}

    store = {
        "store": "s3+25ms",
        "floor": {"put_if_absent_ms": 30.0},
        "backoff": [row("default", 8, "fresh", 400, 700), row("carrier", 8, "fresh", 250, 300)],
    }
    out = tmp_path / "tail.png"
    assert not plot_tail({"stores": [{**store, "backoff": store["backoff"][:1]}]}, out)
    assert not out.exists()  # no carrier row: nothing to compare
    assert plot_tail({"stores": [store, {"store": "local", "floor": {}}]}, out)
    assert out.stat().st_size > 1000
    # with the racing schedule beside them: three bars per cell
    racing = {**store, "backoff": [*store["backoff"], row("racing", 8, "fresh", 450, 900)]}
    three = tmp_path / "three.png"
    assert plot_tail({"stores": [racing]}, three)
    assert three.stat().st_size > out.stat().st_size  # one more series drawn


def test_the_tail_sweep_measures_each_delay_in_its_own_round_trips(tmp_path: Path) -> None:
    """``benchmarks.tail_sweep``: the store behind each delay, its round trip measured there,
    every cell's commits accounted for, p99 - p50 expressed in that round trip."""
    from benchmarks.tail_sweep import main as sweep_main

    plot = tmp_path / "tail_sweep.png"
    args = ["--stores", "s3", "--delays", "5,40", "--writers", "2", "--commits", "2"]
    assert sweep_main([*args, "--runs", "1", "--out", str(tmp_path), "--plot", str(plot)]) == 0
    out = json.loads((tmp_path / "tail_sweep.json").read_text())
    summary = {(s["delay_ms"], s["read_version"]): s for s in out["summary"]}
    assert set(summary) == {(5.0, "fresh"), (5.0, "stale"), (40.0, "fresh"), (40.0, "stale")}
    for (delay, _), s in summary.items():
        # every request waits the delay: so does the measured round trip
        assert delay <= s["round_trip_ms"] < delay + 40
        assert s["runs"] == 1
        assert s["failures"] == s["unaccounted"] == 0
        assert s["p50_rt"] <= s["p99_rt"]
        assert s["gap_rt"] == s["gap_rt_min"] == s["gap_rt_max"]
        # the round trip under the cell's load waits the delay too, and the tail is also
        # given in it
        assert delay <= s["loaded_rt_ms"]
        gap_ms = s["gap_rt"] * s["round_trip_ms"]
        assert abs(s["gap_loaded_rt"] * s["loaded_rt_ms"] - gap_ms) < 1e-6
    for row in out["rows"]:
        rt = row["round_trip_ms"]
        gap = summary[(row["delay_ms"], row["read_version"])]["gap_rt"]
        assert abs((row["p99_ms"] - row["p50_ms"]) / rt - gap) < 1e-9
        assert row["commits"] == 4
        # the probe ran beside the writers: at least one PUT, their median at least the delay
        assert row["probe_samples"] >= 1
        assert row["loaded_round_trip_ms"] >= row["delay_ms"]
        # after each writer's first commit: one commit each of the two writers
        assert row["p50_later_ms"] <= row["p99_later_ms"] <= row["max_ms"]
    assert all(s["gap_later_rt"] >= 0 for s in summary.values())
    assert plot.stat().st_size > 1000


def test_the_sustained_tail_leaves_out_each_writers_first_commit() -> None:
    """The tail of sustained contention is taken over the commits after each writer's
    first (the first race's losers wait for a carrier to start): the slow first commits
    are not in it, every later one is."""
    from benchmarks.tail_sweep import _later

    out = _later([[900.0, 100.0, 120.0], [800.0, 110.0], [700.0]])
    assert out == {"p50_later_ms": 110.0, "p99_later_ms": 120.0}
