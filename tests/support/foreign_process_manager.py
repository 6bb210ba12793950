#!/usr/bin/python3
"""A process manager that cmdbus does not run, for the interoperability tests.

It behaves as the reference Python library's process manager and reply router
behave, with the same rows and SQL calls, for a process type of its own: its
processes send `Test` commands (served by the demo handler of `cmdbus worker
--demo`) with their replies going to a process reply queue; its router reads
that queue with pgmq.read, applies each reply of its own processes in one
transaction with the message's delete, and deletes the replies it cannot
apply (no correlation id, no such process in its domain, a process type it
does not know), as the reference router does.

    foreign_process_manager.py start --dsn DSN --domain D --queue Q
        --type T --processes N --steps K
      starts N processes of type T (K steps each) and prints their ids
    foreign_process_manager.py run --dsn DSN --domain D --queue Q --type T
        --steps K --deadline SECONDS [--vt SECONDS]
      routes replies until every process of type T in D is COMPLETED (exit 0)
      or the deadline passes (exit 1); prints one JSON line: completed,
      replies applied, the highest read_ct seen on a reply of its own, and
      the messages it deleted without applying them
Needs psycopg2 (Debian: python3-psycopg2).
"""

import argparse
import json
import sys
import time
import uuid

import psycopg2


def step_name(i):
    return "Step%d" % (i + 1)


def send_command(cur, domain, queue, process_id, step):
    """Sends the step's command as the reference bus does: message, NOTIFY,
    command row, SENT audit row; then the process_audit row."""
    command_id = str(uuid.uuid4())
    message = {
        "domain": domain,
        "command_type": "Test",
        "command_id": command_id,
        "correlation_id": process_id,
        "data": {"step": step, "behavior": {"result": {"done": step}}},
        "reply_to": queue,
    }
    cur.execute("SELECT pgmq.send(%s, %s::jsonb, 0)",
                (domain + "__commands", json.dumps(message)))
    msg_id = cur.fetchone()[0]
    cur.execute("NOTIFY pgmq_notify_%s__commands" % domain)
    cur.execute(
        "INSERT INTO commandbus.command (domain, queue_name, msg_id, "
        "command_id, command_type, status, attempts, max_attempts, "
        "reply_queue, correlation_id) VALUES (%s, %s, %s, %s, 'Test', "
        "'PENDING', 0, 3, %s, %s)",
        (domain, domain + "__commands", msg_id, command_id, queue, process_id))
    cur.execute(
        "INSERT INTO commandbus.audit (domain, command_id, event_type, "
        "details_json) VALUES (%s, %s, 'SENT', %s::jsonb)",
        (domain, command_id, json.dumps({
            "command_type": "Test", "correlation_id": process_id,
            "reply_to": queue, "msg_id": msg_id, "batch_id": None})))
    cur.execute(
        "INSERT INTO commandbus.process_audit (domain, process_id, step_name, "
        "command_id, command_type, command_data, sent_at) VALUES "
        "(%s, %s, %s, %s, 'Test', %s::jsonb, NOW())",
        (domain, process_id, step, command_id, json.dumps(message["data"])))
    cur.execute(
        "UPDATE commandbus.process SET current_step = %s, status = 'WAITING', "
        "updated_at = NOW() WHERE domain = %s AND process_id = %s",
        (step, domain, process_id))


def start(conn, args):
    ids = []
    for _ in range(args.processes):
        process_id = str(uuid.uuid4())
        with conn:
            with conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO commandbus.process (domain, process_id, "
                    "process_type, status, state) VALUES (%s, %s, %s, "
                    "'PENDING', %s::jsonb)",
                    (args.domain, process_id, args.type,
                     json.dumps({"done": []})))
                send_command(cur, args.domain, args.queue, process_id,
                             step_name(0))
        ids.append(process_id)
    print(json.dumps({"process_ids": ids}))
    return 0


def handle(cur, args, process, reply, stats):
    """The reference's handle_reply for this type: record the reply, then
    the next step or COMPLETED (FAILED: CANCELED)."""
    process_id, state, current = process
    cur.execute(
        "UPDATE commandbus.process_audit SET reply_outcome = %s, "
        "reply_data = %s::jsonb, received_at = NOW() WHERE domain = %s AND "
        "process_id = %s AND command_id = %s",
        (reply.get("outcome"), json.dumps(reply.get("result")), args.domain,
         process_id, reply.get("command_id")))
    if reply.get("outcome") != "SUCCESS":
        cur.execute(
            "UPDATE commandbus.process SET status = 'CANCELED', "
            "error_code = %s, updated_at = NOW(), completed_at = NOW() "
            "WHERE domain = %s AND process_id = %s",
            (reply.get("error_code"), args.domain, process_id))
        return
    state["done"].append(current)
    index = int(current[len("Step"):])
    if index < args.steps:
        cur.execute(
            "UPDATE commandbus.process SET state = %s::jsonb, updated_at = "
            "NOW() WHERE domain = %s AND process_id = %s",
            (json.dumps(state), args.domain, process_id))
        send_command(cur, args.domain, args.queue, process_id,
                     step_name(index))
    else:
        cur.execute(
            "UPDATE commandbus.process SET state = %s::jsonb, status = "
            "'COMPLETED', updated_at = NOW(), completed_at = NOW() WHERE "
            "domain = %s AND process_id = %s",
            (json.dumps(state), args.domain, process_id))
    stats["applied"] += 1


def route(conn, args, stats, msg_id, read_ct, message):
    reply = message if isinstance(message, dict) else {}
    with conn:
        with conn.cursor() as cur:
            correlation_id = reply.get("correlation_id")
            process = None
            if correlation_id:
                cur.execute(
                    "SELECT process_id::text, process_type, state, "
                    "current_step FROM commandbus.process WHERE domain = %s "
                    "AND process_id = %s FOR UPDATE",
                    (args.domain, correlation_id))
                process = cur.fetchone()
            if process is None or process[1] != args.type:
                # The reference discards what it cannot apply.
                stats["deleted_unknown"] += 1
            else:
                stats["max_read_ct"] = max(stats["max_read_ct"], read_ct)
                handle(cur, args, (process[0], process[2], process[3]), reply,
                       stats)
            cur.execute("SELECT pgmq.delete(%s, %s::bigint)",
                        (args.queue, msg_id))


def unfinished(conn, args):
    with conn:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM commandbus.process WHERE domain = %s "
                "AND process_type = %s AND status NOT IN ('COMPLETED', "
                "'CANCELED')", (args.domain, args.type))
            return cur.fetchone()[0]


def run(conn, args):
    stats = {"applied": 0, "max_read_ct": 0, "deleted_unknown": 0}
    deadline = time.monotonic() + args.deadline
    while True:
        left = unfinished(conn, args)
        if left == 0 or time.monotonic() > deadline:
            break
        with conn:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT msg_id, read_ct, message FROM pgmq.read(%s, %s, "
                    "%s)", (args.queue, args.vt, 10))
                batch = cur.fetchall()
        for msg_id, read_ct, message in batch:
            route(conn, args, stats, msg_id, read_ct, message)
        if not batch:
            time.sleep(0.05)  # the reference polls too (poll_interval)
    stats["completed"] = unfinished(conn, args) == 0
    print(json.dumps(stats))
    return 0 if stats["completed"] else 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["start", "run"])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--domain", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--type", required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--vt", type=int, default=30)
    parser.add_argument("--deadline", type=float, default=30)
    args = parser.parse_args()
    conn = psycopg2.connect(args.dsn)
    try:
        return start(conn, args) if args.mode == "start" else run(conn, args)
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
