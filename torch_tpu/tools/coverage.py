"""Op coverage of the tpu backend, measured by PyTorch's own OpInfo samples.

    python -m torch_tpu.tools.coverage                 # full sweep (every OpInfo)
    python -m torch_tpu.tools.coverage --quick         # the CI slice only
    python -m torch_tpu.tools.coverage --ops add mm 'linalg.*' --dtypes float32
    python -m torch_tpu.tools.coverage --write-expected tests/conformance/expected_failures.txt

Prints: the ATen overloads registered for PrivateUse1 and the operators
lowered natively (both from the C++ op list, torch_tpu._C._op_list(), which
docs/ops.md also shows), the OpInfos whose forward samples all pass per dtype and
whose float32 gradients all pass, the Core ATen IR operators still missing,
and the missing ops that fail the most OpInfos. Writes the same as JSON
(default benchmarks/results/coverage.json). The sweep runs in worker
processes (tests/conformance uses the same harness, torch_tpu.tools.conformance),
so an op that crashes its process is recorded as a failure and the sweep goes on.
"""
import argparse
import collections
import fnmatch
import json
import os
import queue
import subprocess
import sys
import threading
import time

CASE_TIMEOUT_S = 600


def _select(patterns, quick):
    from . import conformance
    from .opinfo_slice import SLICE
    ids = list(conformance.opinfos())
    if quick:
        ids = [i for i in ids if i in SLICE]
    if patterns:
        ids = [i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in patterns)]
    return ids


def _worker(ids, dtypes):
    """Runs cases, one JSON line each on stdout (the parent reads them)."""
    from . import conformance
    ops = conformance.opinfos()
    for i in ids:
        print(json.dumps({"start": i}), flush=True)
        for dtype, kind in conformance.cases(ops[i], dtypes):
            start = time.perf_counter()
            o = conformance.run_case(ops[i], dtype, kind)
            print(json.dumps({"op": i, "dtype": dtype, "kind": kind, "status": o.status,
                              "reason": conformance.short_reason(o) if o.status == "fail"
                              else o.detail, "missing": list(o.missing),
                              "passed": o.passed, "failed": o.failed,
                              "seconds": round(time.perf_counter() - start, 3)}), flush=True)
        print(json.dumps({"done": i}), flush=True)


def _spawn(ids, dtypes):
    cmd = [sys.executable, "-m", "torch_tpu.tools.coverage", "--worker",
           "--dtypes", *dtypes, "--ops", *ids]
    env = dict(os.environ, TORCH_TPU_CPU_FALLBACK="0")
    env.setdefault("TORCH_TPU_DISK_CACHE", "0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    lines = queue.Queue()
    threading.Thread(target=lambda: ([lines.put(l) for l in proc.stdout], lines.put(None)),
                     daemon=True).start()
    return proc, lines


def _run_chunk(ids, dtypes, results, progress, log):
    """Runs ids in a worker; restarts past an op that crashes or hangs."""
    while ids:
        proc, lines = _spawn(ids, dtypes)
        current = None
        while True:
            try:
                line = lines.get(timeout=CASE_TIMEOUT_S)
            except queue.Empty:
                proc.kill()
                line, why = None, f"timed out after {CASE_TIMEOUT_S}s"
            else:
                why = None
            if line is None:
                break
            record = json.loads(line)
            log(record)
            if "done" in record:
                continue
            if "start" in record:
                current = record["start"]
                ids = ids[ids.index(current) + 1:]
                progress(current)
            else:
                results.append(record)
        proc.wait()
        if current is None and proc.returncode != 0:
            raise RuntimeError(f"conformance worker failed to start ({proc.returncode})")
        if proc.returncode == 0:
            return
        if proc.returncode != 0:
            crashed = _record_crash(current, dtypes, results, why or f"worker died "
                                    f"({proc.returncode})")
            for record in crashed + [{"done": current}]:
                log(record)


def _record_crash(op, dtypes, results, why):
    from . import conformance
    done = {(r["dtype"], r["kind"]) for r in results if r["op"] == op}
    crashed = [{"op": op, "dtype": dtype, "kind": kind, "status": "fail",
                "reason": f"crash: {why}", "missing": [], "passed": 0, "failed": 1,
                "seconds": 0}
               for dtype, kind in conformance.cases(conformance.opinfos()[op], dtypes)
               if (dtype, kind) not in done]
    results.extend(crashed)
    return crashed


def _resume(path):
    """Records of the OpInfos a previous sweep finished (its --log file)."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    finished = {r["done"] for r in records if "done" in r}
    return [r for r in records if r.get("op") in finished]


def sweep(ids, dtypes, workers=1, verbose=True, log_path=None):
    """Per-case result records for the OpInfos `ids`. With log_path, records
    are appended there as they arrive and OpInfos already finished there are
    not run again (an interrupted sweep resumes)."""
    results = _resume(log_path)
    finished = {r["op"] for r in results}
    todo = [i for i in ids if i not in finished]
    done, lock = [len(ids) - len(todo)], threading.Lock()
    log_file = open(log_path, "a") if log_path else None

    def log(record):
        if log_file and "start" not in record:
            with lock:
                log_file.write(json.dumps(record) + "\n")
                log_file.flush()

    chunks = [todo[w::workers] for w in range(workers)]

    def progress(op):
        done[0] += 1
        if verbose and done[0] % 25 == 0:
            print(f"  ... {done[0]}/{len(ids)} OpInfos", file=sys.stderr, flush=True)

    threads = [threading.Thread(target=_run_chunk, args=(c, dtypes, results, progress, log))
               for c in chunks if c]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if log_file:
        log_file.close()
    order = {i: n for n, i in enumerate(ids)}
    results = [r for r in results if r["op"] in order]
    return sorted(results, key=lambda r: (order[r["op"]], r["dtype"], r["kind"]))


# -- the report --------------------------------------------------------------

def _base(name):
    """The operator an overload belongs to: no namespace, no overload name, and
    an in-place form (`add_`, `_foreach_mul_`) counts as its operator."""
    base = name.split("::", 1)[-1].split(".", 1)[0].split(" ", 1)[0]
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def op_list():
    """The C++ op list (csrc/aten/op_list.h), one dict per tpu kernel: op,
    kind (lowered, derived, host-synced, core, composite, collective, pytorch,
    user — a StableHLO kernel registered through torch_tpu.library —, external —
    another package's op in its own namespace, e.g. TorchRec's —, fallback), family (the file that lowers or registers it), lowering (the
    registry entry serving a lowered or derived op) and dispatch key."""
    import torch_tpu
    fields = ("op", "kind", "family", "lowering", "key")
    return [dict(zip(fields, row)) for row in torch_tpu._C._op_list()]


# Kinds that run on the device by the backend's own code (the count of
# operators "lowered natively"): not views/allocation, not composites of
# other ATen ops, not PyTorch's collectives, not the fallback.
NATIVE_KINDS = ("lowered", "derived", "host-synced")


def registrations(rows=None):
    """Distinct PrivateUse1 overloads, and the distinct operator base names
    served natively (lowered, derived and host-synced), from the op list."""
    rows = op_list() if rows is None else rows
    overloads = {r["op"] for r in rows
                 if r["key"] == "PrivateUse1" and r["kind"] not in ("fallback", "user", "external")}
    native = {_base(r["op"]) for r in rows if r["kind"] in NATIVE_KINDS}
    return overloads, native


def missing_core_ops(overloads):
    """Core ATen IR overloads (torch.Tag.core) with no PrivateUse1 kernel that
    PyTorch does not decompose above the backend (CompositeImplicitAutograd).
    Each is marked when a CompositeExplicitAutograd kernel still serves it."""
    import torch
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    missing = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if not name.startswith("aten::") or name in overloads:
            continue
        base, _, overload = name[6:].partition(".")
        try:
            packet = getattr(torch.ops.aten, base)
            tags = getattr(packet, overload or "default").tags
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core not in tags or has(name, "CompositeImplicitAutograd"):
            continue
        composite = has(name, "CompositeExplicitAutograd") or \
            has(name, "CompositeExplicitAutogradNonFunctional")
        missing.append({"op": name, "composite_explicit": bool(composite)})
    return missing


def summarize(results, ids, dtypes):
    """Counts of OpInfos whose cases all pass, per dtype and kind."""
    by_case = collections.defaultdict(dict)
    for r in results:
        by_case[(r["dtype"], r["kind"])][r["op"]] = r["status"]
    table = {}
    for (dtype, kind), ops in sorted(by_case.items()):
        counts = collections.Counter(ops.values())
        table[f"{dtype}/{kind}"] = {"pass": counts["pass"], "fail": counts["fail"],
                                    "skip": counts["skip"], "opinfos": len(ops)}
    return table


def _missing_key(name):
    """'aten::_linalg_svd.U' (an out= overload) -> 'aten::_linalg_svd': the
    functional op is what gets lowered; other overloads ('round.decimals') stay."""
    import torch
    op, _, suffix = name.partition(" ")
    base, _, overload = op.partition(".")
    try:
        schema = getattr(getattr(torch.ops.aten, base.split("::")[-1]), overload)._schema
        if any(a.is_out for a in schema.arguments):
            op = base
    except (AttributeError, RuntimeError):
        pass
    return f"{op} {suffix}".strip()


def top_missing(results, limit=40):
    """Missing ATen ops ranked by how many failing (OpInfo, dtype, kind) cases
    and distinct OpInfos name them."""
    cases, opinfos = collections.Counter(), collections.defaultdict(set)
    for r in results:
        for name in {_missing_key(n) for n in r["missing"]}:
            cases[name] += 1
            opinfos[name].add(r["op"])
    ranked = sorted(cases, key=lambda n: (-len(opinfos[n]), -cases[n], n))
    return [{"op": n, "opinfos": len(opinfos[n]), "cases": cases[n],
             "examples": sorted(opinfos[n])[:5]} for n in ranked[:limit]]


def failure_kinds(results):
    kinds = collections.Counter()
    for r in results:
        if r["status"] == "fail":
            reason = r["reason"]
            kinds["missing op" if r["missing"] else reason.split(":", 1)[0][:40]] += 1
    return dict(kinds.most_common(12))


def report(results, ids, dtypes, wall_s):
    rows = op_list()
    overloads, native = registrations(rows)
    missing = missing_core_ops(overloads)
    return {
        "torch": __import__("torch").__version__,
        "privateuse1_overloads": len(overloads),
        "native_operators": len(native),
        "kernels_by_kind": dict(collections.Counter(r["kind"] for r in rows
                                                    if r["kind"] != "fallback")),
        "opinfos": len(ids),
        "dtypes": list(dtypes),
        "sweep_wall_s": round(wall_s, 1),
        "all_samples_pass": summarize(results, ids, dtypes),
        "failure_kinds": failure_kinds(results),
        "top_missing_ops": top_missing(results),
        "core_aten_missing": missing,
        "results": results,
    }


def render(rep):
    out = [f"torch {rep['torch']}: {rep['privateuse1_overloads']} ATen overloads registered "
           f"for PrivateUse1; {rep['native_operators']} distinct operators lowered natively",
           "kernels by kind: " + ", ".join(f"{k} {n}" for k, n in
                                            sorted(rep["kernels_by_kind"].items())),
           f"OpInfo sweep: {rep['opinfos']} OpInfos, {rep['sweep_wall_s']} s wall", "",
           "OpInfos whose samples all pass (pass / fail / skip of those with the dtype):"]
    for case, c in rep["all_samples_pass"].items():
        out.append(f"  {case:<16} {c['pass']:>4} / {c['fail']:>4} / {c['skip']:>3}"
                   f"   of {c['opinfos']}")
    out += ["", "Failure kinds (cases): " + ", ".join(
        f"{k} {v}" for k, v in rep["failure_kinds"].items()), "",
        "Top missing ops (OpInfos failed / cases):"]
    for m in rep["top_missing_ops"][:25]:
        out.append(f"  {m['op']:<48} {m['opinfos']:>3} / {m['cases']:>3}   "
                   f"e.g. {', '.join(m['examples'][:3])}")
    core = rep["core_aten_missing"]
    plain = [m["op"] for m in core if not m["composite_explicit"]]
    out += ["", f"Core ATen IR overloads with no tpu kernel: {len(core)} "
            f"({len(core) - len(plain)} served by a CompositeExplicitAutograd kernel):",
            "  no kernel at all: " + (", ".join(plain) or "none"),
            "  composite only:   " + ", ".join(m["op"] for m in core if m["composite_explicit"])]
    return "\n".join(out)


def write_expected(results, path):
    from . import conformance
    failures = {(r["op"], r["dtype"], r["kind"]): r["reason"] or "fails"
                for r in results if r["status"] == "fail"}
    with open(path, "w") as f:
        f.write(conformance.format_expected(failures))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", default=None, help="OpInfo ids or globs")
    parser.add_argument("--quick", action="store_true", help="the CI slice only")
    parser.add_argument("--dtypes", nargs="*", default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", default="benchmarks/results/coverage.json")
    parser.add_argument("--write-expected", default=None, metavar="PATH")
    parser.add_argument("--log", default=None, metavar="PATH",
                        help="append results here as they arrive; resume from it")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from . import conformance
    dtypes = args.dtypes or list(conformance.DTYPES)
    if args.worker:
        return _worker(args.ops, dtypes)
    ids = _select(args.ops, args.quick)
    start = time.perf_counter()
    results = sweep(ids, dtypes, args.workers, log_path=args.log)
    rep = report(results, ids, dtypes, time.perf_counter() - start)
    print(render(rep))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(rep, f, indent=1)
    if args.write_expected:
        write_expected(results, args.write_expected)


if __name__ == "__main__":
    main()
