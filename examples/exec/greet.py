#!/usr/bin/env python3
"""A command handler for `cmdbus worker --exec`: greets data.name.

The worker writes the command as one JSON document on standard input and
reads the result from standard output; the exit status is the outcome
(docs/exec.md): 0 success, 75 a temporary failure (retried), 65 a business
rule failure (with an error document), anything else a permanent failure.
"""

import json
import sys

EX_DATAERR = 65    # business rule
EX_TEMPFAIL = 75   # transient: try again later


def main():
    cmd = json.load(sys.stdin)
    data = cmd["data"]
    name = data.get("name")
    if not isinstance(name, str) or not name:
        json.dump({"code": "NAME_REQUIRED",
                   "message": "data.name must be a non-empty string"},
                  sys.stdout)
        return EX_DATAERR
    if data.get("busy") and cmd["attempt"] < cmd["max_attempts"]:
        # Log lines go to standard error; the worker keeps their end as the
        # error message.
        print(f"attempt {cmd['attempt']}: the greeter is busy",
              file=sys.stderr)
        return EX_TEMPFAIL
    json.dump({"greeting": f"Hello, {name}!",
               "command_id": cmd["command_id"],
               "attempt": cmd["attempt"]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
