// What the JS sides of the peers' benchmark share: the roles and their
// arguments, the clock, and the consumer's measurement. It is defined
// exactly as in bench/peers_bench.cpp (the cmdbus side), so that the three
// systems are measured alike:
//   * handled: handler calls (one per job); first_us: wall clock (µs since
//     the epoch) of the first call;
//   * once the handler has been called N times, the database is asked every
//     5 ms how many jobs are left; end_us is when none is (or the deadline);
//     done = N minus what is left;
//   * latencies_us: for each job stamped by `send`, the handler call's time
//     minus the stamp taken when the job was due and handed to the sender
//     (sendPaced: the start of its enqueue call, or of its wait for one);
//   * peak_rss_kib: the process's peak resident set (getrusage), cpu_s: its
//     CPU time from ready to end_us.
// Standard output carries one JSON object per line with an "event" field;
// the libraries' own logs go to standard error.

import pg from "pg";

/// Microseconds since the epoch, from the same clock as the C++ side.
export function nowUs() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

export function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

/// The database of this process (PEERS_DB_URL, set by the harness).
export function databaseUrl() {
  const url = process.env.PEERS_DB_URL;
  if (!url) throw new Error("PEERS_DB_URL is not set");
  return url;
}

function option(argv, name, fallback) {
  const at = argv.indexOf(name);
  return at >= 0 && at + 1 < argv.length ? argv[at + 1] : fallback;
}

/// Counts handler calls and collects the latencies of stamped jobs.
export class Tally {
  constructor(jobs) {
    this.jobs = jobs;
    this.handled = 0;
    this.firstUs = 0;
    this.latenciesUs = [];
    this.reached = new Promise((resolve) => (this.onReached = resolve));
  }

  /// Called at the start of the handler, once per job, with its payload.
  record(payload) {
    const now = nowUs();
    if (this.handled++ === 0) this.firstUs = now;
    if (payload && typeof payload.sent_us === "number")
      this.latenciesUs.push(now - payload.sent_us);
    if (this.handled === this.jobs) this.onReached();
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/// Runs a consumer until `jobs` jobs are done or `maxSeconds` passed since
/// it was ready. `side.consume(config, tally)` starts it and resolves to
/// { stop() }; `side.leftQuery` counts the jobs not done yet.
async function consume(side, config, jobs, maxSeconds) {
  const tally = new Tally(jobs);
  const db = new pg.Client({ connectionString: databaseUrl() });
  await db.connect();
  const left = async () => Number((await db.query(side.leftQuery)).rows[0].count);

  const consumer = await side.consume(config, tally);
  const cpu0 = process.cpuUsage();
  const readyUs = nowUs();
  emit({ event: "ready" });

  const deadline = Date.now() + maxSeconds * 1000;
  let timer;
  const expired = new Promise((resolve) => {
    timer = setTimeout(resolve, maxSeconds * 1000);
  });
  await Promise.race([tally.reached, expired]);
  let remaining = jobs;
  while (Date.now() < deadline && tally.handled >= jobs) {
    remaining = await left();
    if (remaining === 0) break;
    await sleep(5);
  }
  const capped = remaining !== 0;
  if (capped) remaining = await left();
  const endUs = nowUs();
  const cpu = process.cpuUsage(cpu0);
  clearTimeout(timer);
  await consumer.stop();
  await db.end();
  emit({
    event: "result",
    handled: tally.handled,
    done: jobs - remaining,
    capped,
    first_us: tally.firstUs,
    ready_us: readyUs,
    end_us: endUs,
    cpu_s: (cpu.user + cpu.system) / 1e6,
    peak_rss_kib: process.resourceUsage().maxRSS,
    latencies_us: tally.latenciesUs,
  });
}

/// The enqueue calls a sender runs at once; the sides give their sender a
/// pool of this many connections (cmdbus's sender: 16 threads as well).
export const SENDER_CALLS = 16;
const MAX_BATCH = 1000;

/// Enqueues `rate` jobs a second for `seconds` seconds, open loop: each job
/// is stamped when it is due on the schedule (the application's enqueue
/// call starts) whether or not earlier calls have returned. Up to
/// SENDER_CALLS calls run at once, one job each while the database keeps
/// up; a job due while all of them are busy waits and goes with the next
/// free call, together with every other job waiting (the side's bulk
/// enqueue, `sendMany`): the client-side group commit that cmdbus's send()
/// does for concurrent sends. So a side whose single enqueue is slower than
/// the schedule still holds the offered rate, its jobs' latency including
/// that wait. Emits the jobs, the seconds from the first due time until the
/// last call returned, the calls made and the largest batch.
async function sendPaced(side, config, rate, seconds) {
  const sender = await side.sender(config);
  const total = rate * seconds;
  const waiting = [];
  let running = 0;
  let calls = 0;
  let largest = 0;
  let failure = null;
  let returned = () => {};
  const startCalls = () => {
    while (running < SENDER_CALLS && waiting.length > 0 && !failure) {
      const batch = waiting.splice(0, MAX_BATCH);
      ++running;
      ++calls;
      largest = Math.max(largest, batch.length);
      (batch.length === 1 ? sender.send(batch[0]) : sender.sendMany(batch))
        .catch((err) => {
          failure ??= err;
        })
        .finally(() => {
          --running;
          startCalls();
          returned();
        });
    }
  };
  const start = performance.now();
  for (let i = 0; i < total && !failure; ++i) {
    const wait = start + (i * 1000) / rate - performance.now();
    if (wait > 0) await sleep(wait);
    waiting.push({ sent_us: nowUs() });
    startCalls();
  }
  while (running > 0 || (waiting.length > 0 && !failure))
    await new Promise((resolve) => (returned = resolve));
  const secs = (performance.now() - start) / 1000;
  await sender.close();
  if (failure) throw failure;
  emit({ event: "sent", jobs: total, seconds: secs, calls, largest_batch: largest });
}

/// Runs the role named on the command line with `side`'s implementation:
///   setup --config C | preload --jobs N --config C
///   | consume --config C --jobs N --max-seconds S
///   | send --config C --rate R --seconds S
export async function main(side) {
  const argv = process.argv.slice(2);
  const role = argv[0];
  const config = option(argv, "--config", "default");
  if (!side.configs.includes(config))
    throw new Error(`unknown --config ${config} (${side.configs.join(", ")})`);
  const jobs = Number(option(argv, "--jobs", "50000"));
  if (role === "setup") {
    await side.setup(config);
  } else if (role === "preload") {
    const t0 = performance.now();
    await side.preload(config, jobs);
    emit({ event: "preloaded", jobs, seconds: (performance.now() - t0) / 1000 });
  } else if (role === "consume") {
    await consume(side, config, jobs, Number(option(argv, "--max-seconds", "20")));
  } else if (role === "send") {
    await sendPaced(side, config, Number(option(argv, "--rate", "500")),
                    Number(option(argv, "--seconds", "10")));
  } else {
    throw new Error(`unknown role ${role}`);
  }
}

/// Runs main() and exits: non-zero with the error on standard error.
export function run(side) {
  main(side).then(
    () => process.exit(0),
    (err) => {
      console.error(`${side.name}: ${err.stack || err}`);
      process.exit(1);
    },
  );
}
