#!/usr/bin/env python3
"""Packing gain on one GPU: four small GPT jobs (examples/shakespeare-char.yaml)
on a real yard-server + yard-worker (--gpus auto, best-fit policy) on
loopback, run

  sequential: one after another, each submitted when the previous ended,
              each holding the whole GPU (gpu_compute_milli 1000), and
  packed:     all four at once, a quarter GPU each (gpu_compute_milli 250),
              which best-fit packs onto the one GPU,

without MPS and, when nvidia-cuda-mps-control is on the PATH, with an MPS
control daemon started for the run (the worker sees it and caps each shared
job at its compute share). Reports each job's steady tokens/s (the median
of its progress reports after the first), the packed aggregate over one job
alone, each packed job's slowdown, makespans, and GPU utilisation sampled
by nvidia-smi every 200 ms. Writes packing.csv (one row per job),
summary.csv (one row per scenario) and summary.txt to --out.

  bench/packing/packing_bench.py --bin build/bin --out /tmp/packing
      [--mode gpu|cpu] [--steps 3000] [--jobs 4] [--mps auto|off|only]
      [--data-root REPO] [--timeout-s 240]

--mode cpu runs the same scenarios on CPU slots (gpus: 0; the worker gets
--cpu-slots JOBS and --gpus none): a check of the driver on a machine
without a GPU, not a figure worth recording. A plain python3 script with
no packages beyond the standard library; why Python and not bash: it
parses the jobs' JSON events and samples nvidia-smi beside them.
"""
import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LOG_EVERY = 100


class Cluster:
    """A yard-server and one yard-worker on loopback in a scratch folder."""

    def __init__(self, a, state, env):
        self.a, self.state, self.env = a, state, env
        self.procs = []
        os.makedirs(state, exist_ok=True)
        self.server = self._start("yard-server", [
            "--listen", "127.0.0.1:0", "--metrics-listen", "",
            "--state-dir", f"{state}/server", "--data-root", a.data_root,
            # Packed without MPS too, to measure time-slicing (by default
            # the server gives such a GPU whole to one job at a time).
            "--policy", "best-fit", "--share-gpus", "always"])
        addr_file = f"{state}/server/yard-server.addr"
        self.addr = wait_for(lambda: read_first_line(addr_file), 30,
                             "yard-server's address file")
        gpus = ["--gpus", "auto"] if a.mode == "gpu" else ["--gpus", "none"]
        self._start("yard-worker", [
            "--server", self.addr, "--work-dir", f"{state}/worker",
            "--cpu-slots", str(a.jobs), "--data-root", a.data_root,
            "--name", "bench-worker", "--metrics-listen", "",
            "--token-file", f"{state}/server/worker.token"] + gpus)
        admin = ["--token-file", f"{state}/server/admin.token"]
        token = self.yard(admin + ["token", "create", "bench"]).split()[-1]
        self.base = [f"{a.bin}/yard", "--server", self.addr, "--token", token]
        wait_for(self._worker_ready, 60, "the worker to join")

    def _start(self, name, args):
        log = open(f"{self.state}/{name}.log", "w")
        p = subprocess.Popen([f"{self.a.bin}/{name}"] + args, cwd=ROOT,
                             stdout=log, stderr=subprocess.STDOUT,
                             env=self.env)
        self.procs.append((p, name))
        return p

    def _worker_ready(self):
        out = self.yard(["workers"], base=True)
        return "bench-worker" in out and "READY" in out.upper()

    def yard(self, args, base=False, check=True):
        cmd = (self.base if base else [f"{self.a.bin}/yard", "--server",
                                       self.addr]) + args
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                           env=self.env)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: "
                               f"{r.stderr.strip()}")
        return r.stdout

    def stop(self):
        for p, _ in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def read_first_line(path):
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return ""


def wait_for(probe, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {seconds} s waiting for {what}")


def job_spec(a, name, milli):
    """The shakespeare example as JSON-compatible YAML with our overrides:
    the example's top-level blocks we replace are dropped, ours appended."""
    with open(os.path.join(a.data_root, "examples/shakespeare-char.yaml")) as f:
        lines = f.read().splitlines()
    replaced = {"name", "steps", "resources", "eval", "checkpoint",
                "log_every_steps"}
    kept, skipping = [], False
    for line in lines:
        if line and not line.startswith((" ", "#")):
            skipping = line.split(":")[0] in replaced
        if not skipping:
            kept.append(line)
    gpus = (f"  gpus: 1\n  gpu_compute_milli: {milli}\n" if a.mode == "gpu"
            else "  gpus: 0\n")
    return "\n".join(kept) + (
        f"\nname: {name}\nsteps: {a.steps}\nresources:\n{gpus}"
        f"  cpu_threads: 1\neval:\n  every_steps: 0\n  max_batches: 1\n"
        f"checkpoint:\n  every_steps: 0\n  keep_last: 1\n"
        f"log_every_steps: {LOG_EVERY}\n")


def submit(cluster, a, scratch, name, milli):
    path = f"{scratch}/{name}.yaml"
    with open(path, "w") as f:
        f.write(job_spec(a, name, milli))
    return cluster.yard(["submit", path], base=True).strip()


def job_state(cluster, job_id):
    return json.loads(cluster.yard(["-o", "json", "get", job_id], base=True))


def wait_jobs(cluster, ids, timeout_s):
    deadline = time.monotonic() + timeout_s
    terminal = {"SUCCEEDED", "FAILED", "CANCELLED"}
    while time.monotonic() < deadline:
        states = [job_state(cluster, i).get("state") for i in ids]
        if all(s in terminal for s in states):
            return
        time.sleep(0.5)
    for i in ids:
        cluster.yard(["cancel", i], base=True, check=False)
    raise RuntimeError(f"jobs {ids} did not end within {timeout_s} s")


def job_figures(cluster, job_id):
    """Steady tokens/s, tokens trained, start and end (event times)."""
    job = job_state(cluster, job_id)
    events = [json.loads(line) for line in cluster.yard(
        ["-o", "json", "watch", job_id], base=True, check=False).splitlines()
        if line.startswith("{")]
    rates, times = [], []
    for e in events:
        progress = e.get("trainer", {}).get("progress")
        if progress:
            rates.append(float(progress.get("tokens_per_second", 0)))
            times.append(e.get("time", ""))
    steady = rates[1:] or rates
    return {
        "job_id": job_id, "name": job.get("name", ""),
        "state": job.get("state", ""),
        "tokens_per_s": statistics.median(steady) if steady else 0.0,
        "start": parse_time(job.get("start_time", "")),
        "end": parse_time(job.get("end_time", "")),
        "reason": job.get("state_reason", "")}


def parse_time(text):
    """RFC 3339 (protobuf JSON) to seconds since the epoch; 0 if absent."""
    if not text:
        return 0.0
    from datetime import datetime
    text = text.rstrip("Z")
    whole, _, frac = text.partition(".")
    t = datetime.fromisoformat(whole + "+00:00").timestamp()
    return t + (float("0." + frac) if frac else 0.0)


class GpuSampler:
    """nvidia-smi utilisation and memory every 200 ms, on its own thread."""

    def __init__(self, enabled):
        self.samples, self.proc = [], None
        if enabled and shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                 "--format=csv,noheader,nounits", "-lms", "200"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                self.samples.append((float(parts[0]), float(parts[1])))

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
        util = [u for u, _ in self.samples]
        return {"gpu_util_mean": statistics.mean(util) if util else -1,
                "gpu_util_max": max(util) if util else -1,
                "gpu_mem_max_mib": max((m for _, m in self.samples),
                                       default=-1)}


def run_scenario(cluster, a, scratch, scenario, mps):
    """Runs the jobs one way; returns (per-job rows, scenario summary)."""
    sampler = GpuSampler(a.mode == "gpu")
    t0 = time.time()
    ids = []
    if scenario == "sequential":
        for i in range(a.jobs):
            ids.append(submit(cluster, a, scratch, f"seq-{mps}-{i}", 1000))
            wait_jobs(cluster, ids[-1:], a.timeout_s)
    else:
        for i in range(a.jobs):
            ids.append(submit(cluster, a, scratch, f"packed-{mps}-{i}", 250))
        wait_jobs(cluster, ids, a.timeout_s * a.jobs)
    wall = time.time() - t0
    gpu = sampler.stop()
    jobs = [job_figures(cluster, i) for i in ids]
    for j in jobs:
        j.update(scenario=scenario, mps=mps)
    ok = [j for j in jobs if j["state"] == "SUCCEEDED"]
    span = (max(j["end"] for j in ok) - min(j["start"] for j in ok)
            if ok else 0.0)
    tokens = len(ok) * a.steps * 16 * 64  # the example's micro-batch x seq
    summary = {"scenario": scenario, "mps": mps, "jobs_ok": len(ok),
               "wall_s": round(wall, 2), "makespan_s": round(span, 2),
               "tokens_per_s_makespan": round(tokens / span, 1) if span else 0,
               # Packed: the jobs' steady rates side by side; sequential:
               # one job at a time, so the median job's rate.
               "aggregate_tokens_per_s": round(
                   (sum if scenario == "packed" else median_or_zero)(
                       [j["tokens_per_s"] for j in ok]), 1), **gpu}
    return jobs, summary


def median_or_zero(values):
    return statistics.median(values) if values else 0.0


def start_mps(scratch):
    """Starts an MPS control daemon with private pipe/log dirs; the env the
    worker and its jobs need to reach it, or None when MPS is missing."""
    if not shutil.which("nvidia-cuda-mps-control"):
        return None
    env = dict(os.environ,
               CUDA_MPS_PIPE_DIRECTORY=f"{scratch}/mps-pipe",
               CUDA_MPS_LOG_DIRECTORY=f"{scratch}/mps-log")
    os.makedirs(env["CUDA_MPS_PIPE_DIRECTORY"], exist_ok=True)
    os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"], exist_ok=True)
    r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"MPS: nvidia-cuda-mps-control -d failed: {r.stderr.strip()}")
        return None
    return env


def stop_mps(env):
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env,
                   capture_output=True, text=True)


def mps_settings(a, scratch):
    """[(label, env)] for the runs this call makes."""
    runs = [] if a.mps == "only" else [("off", dict(os.environ))]
    if a.mode == "gpu" and a.mps in ("auto", "only"):
        env = start_mps(scratch)
        print("MPS: " + ("control daemon started" if env else
                         "nvidia-cuda-mps-control not found or failed; "
                         "time-slicing only"), flush=True)
        if env:
            runs.append(("on", env))
    return runs


def run_all(a, scratch):
    rows, summaries = [], []
    for mps, env in mps_settings(a, scratch):
        cluster = Cluster(a, f"{scratch}/cluster-mps-{mps}", env)
        try:
            for scenario in ("sequential", "packed"):
                print(f"== {scenario}, MPS {mps}", flush=True)
                jobs, summary = run_scenario(cluster, a, scratch, scenario,
                                             mps)
                rows += jobs
                summaries.append(summary)
                print(json.dumps(summary), flush=True)
        finally:
            cluster.stop()
            if mps == "on":
                stop_mps(env)
    return rows, summaries


def add_ratios(rows, summaries):
    """Packed aggregate over one job alone, and each packed job's slowdown,
    against the same MPS setting's sequential jobs."""
    for s in summaries:
        seq = [r["tokens_per_s"] for r in rows if r["mps"] == s["mps"]
               and r["scenario"] == "sequential" and r["state"] == "SUCCEEDED"]
        single = median_or_zero(seq)
        base = [b for b in summaries if b["mps"] == s["mps"]
                and b["scenario"] == "sequential"]
        seq_makespan = base[0]["tokens_per_s_makespan"] if base else 0
        s["single_job_tokens_per_s"] = round(single, 1)
        s["aggregate_over_single"] = (
            round(s["aggregate_tokens_per_s"] / single, 3) if single else 0)
        s["makespan_speedup"] = (
            round(s["tokens_per_s_makespan"] / seq_makespan, 3)
            if seq_makespan else 0)
        for r in rows:
            if r["mps"] == s["mps"] and r["scenario"] == s["scenario"]:
                r["slowdown"] = (round(single / r["tokens_per_s"], 3)
                                 if r["tokens_per_s"] else 0)


def write_results(out, rows, summaries):
    os.makedirs(out, exist_ok=True)
    fields = ["scenario", "mps", "name", "job_id", "state", "tokens_per_s",
              "slowdown", "start", "end", "reason"]
    with open(f"{out}/packing.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(f"{out}/summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summaries[0]))
        w.writeheader()
        w.writerows(summaries)
    lines = ["scenario    mps  ok  makespan_s  aggregate_tok/s  x_single  "
             "makespan_x  gpu_util_mean"]
    for s in summaries:
        lines.append(f"{s['scenario']:<11} {s['mps']:<4} {s['jobs_ok']:>2}  "
                     f"{s['makespan_s']:>10}  "
                     f"{s['aggregate_tokens_per_s']:>15}  "
                     f"{s['aggregate_over_single']:>8}  "
                     f"{s['makespan_speedup']:>10}  "
                     f"{s['gpu_util_mean']:>13.1f}")
    for r in rows:
        if r["scenario"] == "packed":
            lines.append(f"  packed MPS {r['mps']} {r['name']}: "
                         f"{r['tokens_per_s']:.0f} tokens/s, slowdown "
                         f"{r.get('slowdown', 0)}x")
    text = "\n".join(lines) + "\n"
    with open(f"{out}/summary.txt", "w") as f:
        f.write(text)
    print(text)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    p.add_argument("--out", required=True)
    p.add_argument("--mode", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--mps", choices=["auto", "off", "only"], default="auto")
    p.add_argument("--data-root", default=ROOT)
    p.add_argument("--timeout-s", type=int, default=240,
                   help="per job; packed jobs get jobs x this together")
    a = p.parse_args()
    a.bin = os.path.abspath(a.bin)
    a.data_root = os.path.abspath(a.data_root)
    for name in ("yard-server", "yard-worker", "yard", "yard-train"):
        if not os.access(f"{a.bin}/{name}", os.X_OK):
            p.error(f"{a.bin}/{name} not found")
    if a.jobs < 1 or a.steps < 1:
        p.error("--jobs and --steps must be at least 1")
    return a


def main():
    a = parse_args()
    # A timeout's SIGTERM unwinds through the finally blocks, which stop the
    # cluster and the MPS daemon.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("packing: terminated"))
    scratch = tempfile.mkdtemp(prefix="yard-packing.")
    print(f"scratch (logs, state): {scratch}", flush=True)
    rows, summaries = run_all(a, scratch)
    add_ratios(rows, summaries)
    write_results(a.out, rows, summaries)


if __name__ == "__main__":
    sys.exit(main())
