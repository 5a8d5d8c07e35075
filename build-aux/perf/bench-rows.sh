# Sourced by the dated run scripts here (after device-check set step, $cli, $OUT):
# row FILE LABEL ARGS... runs `benchmark --json ARGS` and appends its result, labelled, to $OUT/FILE;
# prof FILE prints each row of $OUT/FILE with its whole per-op profile (into summary.txt too).
prof() {
  python3 - "$1" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception: continue
    print(d.get("label", d.get("workload")), round(d.get("tokens_per_s", 0), 1), "tok/s", "peak", d.get("peak_device_bytes"))
    if "profile" in d:
        print("  profile", round(d.get("profiled_step_gpu_us", 0)), "us:",
              ", ".join("%s %d x %.0f us" % (o["op"], o["dispatches"], o["us"]) for o in d["profile"]))
PY
}
row() {
  local f=$1 l=$2; shift 2
  step "$l" timeout 60 sh -c "\"$cli\" benchmark --json $* >/tmp/row.json"
  python3 -c "import json,sys; d=json.loads(open('/tmp/row.json').read().strip().splitlines()[-1]); d['label']=sys.argv[1]; print(json.dumps(d))" "$l" >>"$OUT/$f" 2>/dev/null
}
