import json
import os
import sys
import time

log_file, steps = sys.argv[1], int(sys.argv[2])
for step in range(1, steps + 1):
    time.sleep(0.2)
    record = {"event": "checkpoint", "step": step, "pid": os.getpid(), "time": time.time()}
    with open(log_file, "a") as log:
        log.write(json.dumps(record) + "\n")
