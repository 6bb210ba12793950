#!/usr/bin/python3
"""A command worker that cmdbus does not run, for the mixed-fleet tests.

It receives and completes commands as the reference Python library's worker
does, with the same SQL calls: pgmq.read of the domain's command queue
(oldest first, honouring each message's vt, ignoring any member of the
message it does not know, such as "priority"), sp_receive_command per
message (a message whose command is unknown or finished is archived), and
for each command it takes, in one transaction, pgmq.delete and
sp_finish_command(COMPLETED). It runs every command type and ignores the
data. It works one command at a time, `--work` seconds each.

    foreign_worker.py --dsn DSN --domain D --deadline SECONDS
        [--vt SECONDS] [--work SECONDS]
      runs until no command of D is PENDING or IN_PROGRESS (exit 0) or the
      deadline passes (exit 1); prints one JSON line: "completed" (bool) and
      "ran", a list of {command_id, started_at} where started_at is the
      database server's clock_timestamp() right after the read that
      returned the command
Needs psycopg2 (Debian: python3-psycopg2).
"""

import argparse
import json
import sys
import time

import psycopg2


def unfinished(conn, domain):
    with conn:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM commandbus.command WHERE domain = %s "
                "AND status IN ('PENDING', 'IN_PROGRESS')", (domain,))
            return cur.fetchone()[0]


def take_one(conn, domain, queue, vt):
    """Reads one message and receives its command; returns (command_id,
    msg_id, batch_id, reply_to, started_at) or None when nothing was
    visible or the message was not runnable."""
    with conn:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT msg_id, message FROM pgmq.read(%s, %s, 1)",
                (queue, vt))
            row = cur.fetchone()
            if row is None:
                return None
            msg_id, message = row
            cur.execute("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', "
                        "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
            started_at = cur.fetchone()[0]
            command_id = message.get("command_id")
            if command_id is None:
                cur.execute("SELECT pgmq.archive(%s, %s::bigint)",
                            (queue, msg_id))
                return False
            cur.execute(
                "SELECT command_id, reply_queue FROM "
                "commandbus.sp_receive_command(%s, %s::uuid, 'IN_PROGRESS', "
                "%s::bigint, NULL)", (domain, command_id, msg_id))
            received = cur.fetchone()
            if received is None:
                cur.execute("SELECT pgmq.archive(%s, %s::bigint)",
                            (queue, msg_id))
                return False
            cur.execute(
                "SELECT batch_id FROM commandbus.command WHERE domain = %s "
                "AND command_id = %s::uuid", (domain, command_id))
            batch_id = cur.fetchone()[0]
            return (command_id, msg_id, batch_id, received[1], started_at)


def complete(conn, domain, queue, taken):
    command_id, msg_id, batch_id, reply_to, _ = taken
    with conn:
        with conn.cursor() as cur:
            cur.execute("SELECT pgmq.delete(%s, %s::bigint)", (queue, msg_id))
            details = {"msg_id": msg_id, "reply_to": reply_to,
                       "has_result": False}
            cur.execute(
                "SELECT commandbus.sp_finish_command(%s, %s::uuid, "
                "'COMPLETED', 'COMPLETED', NULL, NULL, NULL, %s::jsonb, "
                "%s::uuid)", (domain, command_id, json.dumps(details),
                              batch_id))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--deadline", type=float, default=30)
    parser.add_argument("--vt", type=int, default=30)
    parser.add_argument("--work", type=float, default=0.02)
    args = parser.parse_args()
    queue = args.domain + "__commands"
    conn = psycopg2.connect(args.dsn)
    ran = []
    deadline = time.monotonic() + args.deadline
    try:
        while unfinished(conn, args.domain) > 0:
            if time.monotonic() > deadline:
                break
            taken = take_one(conn, args.domain, queue, args.vt)
            if taken is None:
                time.sleep(0.05)  # the reference polls too
                continue
            if taken is False:
                continue
            time.sleep(args.work)
            complete(conn, args.domain, queue, taken)
            ran.append({"command_id": taken[0], "started_at": taken[4]})
        done = unfinished(conn, args.domain) == 0
    finally:
        conn.close()
    print(json.dumps({"completed": done, "ran": ran}))
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
