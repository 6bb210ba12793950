// The peers' benchmark (scripts/bench --peers runs it): cmdbus beside
// graphile-worker and pg-boss on the same PostgreSQL, in the same run, with
// no-op handlers, printed as one table with ratios to graphile-worker's
// tuned figure. Every phase gets a fresh database; each system is driven
// by its side program (common.mjs for the roles and how they measure):
//   * throughput: --jobs jobs pre-loaded with the system's bulk API, then
//     its consumer started; jobs per second from the first handler call to
//     the moment the database has none left (or --max-seconds after the
//     consumer was ready: the figure is then what was done until then);
//   * latency: the consumer started on an empty queue, then --rate jobs a
//     second enqueued for --seconds, open loop (common.mjs, sendPaced: one
//     call per job while the database keeps up, jobs due while every call
//     is busy go together in the next); p50 / p99 from the job's enqueue
//     (its stamp, just before it is handed to the sender) to the start of
//     the handler; the rate the sender achieved beside it, flagged below
//     95 % of --rate (the latency is then at a lower load than the others');
//   * the consumer process's peak RSS and its CPU time; cmdbus's highest
//     peak RSS against the 64 MiB target.
// Environment (set by scripts/bench-peers): PEERS_PG_DSN (the private
// cluster, key=value, without dbname), CMDBUS_BINARY, CMDBUS_PEERS_BENCH,
// PEERS_LOG_DIR; the versions for the header in PEERS_VERSIONS.
//   node run.mjs [--jobs N] [--rate R] [--seconds S] [--max-seconds S]
//                [--systems graphile-worker,pg-boss,cmdbus]

import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import pg from "pg";

import { SENDER_CALLS } from "./common.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));

function option(name, fallback) {
  const at = process.argv.indexOf(name);
  return at >= 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}

const jobs = Number(option("--jobs", "50000"));
const rate = Number(option("--rate", "500"));
const seconds = Number(option("--seconds", "10"));
const maxSeconds = Number(option("--max-seconds", "20"));
const only = option("--systems", "graphile-worker,pg-boss,cmdbus").split(",");
const logDir = process.env.PEERS_LOG_DIR || os.tmpdir();

// The cluster's connection settings (scripts/pg's key=value form).
const cluster = Object.fromEntries(
  (process.env.PEERS_PG_DSN || "")
    .split(/\s+/)
    .filter((kv) => kv.includes("=") && !kv.startsWith("dbname="))
    .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
);
if (!cluster.host || !cluster.port) throw new Error("PEERS_PG_DSN lacks host or port");

function databaseEnv(db) {
  const user = encodeURIComponent(cluster.user || "");
  const password = encodeURIComponent(cluster.password || "");
  return {
    PEERS_DB_URL: `postgres://${user}:${password}@${cluster.host}:${cluster.port}/${db}`,
    CMDBUS_DSN: `${process.env.PEERS_PG_DSN.replace(/\bdbname=\S+/, "")} dbname=${db}`,
  };
}

const node = process.execPath;
const systems = [
  {
    name: "graphile-worker",
    command: [node, path.join(here, "graphile-worker.mjs")],
    configs: [
      ["tuned", "tuned: 24 jobs, local queue 500, no completion batching"],
      ["batched", "the same, completion batch delay 0"],
      ["default", "defaults: 1 job at a time"],
    ],
  },
  {
    name: "pg-boss",
    command: [node, path.join(here, "pg-boss.mjs")],
    configs: [
      ["tuned", "tuned: 4 workers x batch 100, NOTIFY, burst"],
      ["default", "defaults: 1 worker, 1 job, polls every 2 s"],
    ],
  },
  {
    name: "cmdbus",
    command: [process.env.CMDBUS_PEERS_BENCH],
    migrate: [process.env.CMDBUS_BINARY, "migrate"],
    configs: [
      ["best", "best: concurrency 64, prefetch 64, non-blocking"],
      ["default", "defaults (the worker's own), blocking handler"],
    ],
  },
].filter((s) => only.includes(s.name));

// Runs one process; resolves to its JSON events once it exited with 0.
// `onEvent` sees each event as it arrives. Standard error goes to a log.
let runs = 0;
function runProcess(argv, env, onEvent = () => {}) {
  const log = path.join(logDir, `peers-${String(++runs).padStart(3, "0")}.log`);
  const err = createWriteStream(log);
  err.write(`${argv.map((a) => path.basename(a)).join(" ")}\n`);
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stderr.pipe(err);
    const events = [];
    let buffered = "";
    child.stdout.on("data", (chunk) => {
      buffered += chunk;
      let nl;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (!line.startsWith('{"event"')) continue;
        const event = JSON.parse(line);
        events.push(event);
        onEvent(event);
      }
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (code === 0) resolve(events);
      else reject(new Error(`${argv.slice(0, 3).join(" ")} exited with ${code} (log: ${log})`));
    });
  });
}

const admin = new pg.Client({ ...cluster, database: "postgres" });
await admin.connect();
await admin.query("SET client_min_messages = warning");

let phases = 0;
// A fresh database with the system's schema; returns the environment of
// its processes and a function that settles it before measuring (ANALYZE
// of what was pre-loaded, then a checkpoint, for every system alike).
async function freshDatabase(system, config) {
  const db = `cmdbus_peers_${++phases}`;
  await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${db}`);
  const env = databaseEnv(db);
  if (system.migrate) await runProcess(system.migrate, env);
  await runProcess([...system.command, "setup", "--config", config], env);
  const settle = async () => {
    const c = new pg.Client({ ...cluster, database: db });
    await c.connect();
    await c.query("VACUUM (ANALYZE)");
    await c.query("CHECKPOINT");
    await c.end();
  };
  return { db, env, settle };
}

async function dropDatabase(db) {
  await admin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
}

async function throughput(system, config) {
  const { db, env, settle } = await freshDatabase(system, config);
  await runProcess([...system.command, "preload", "--config", config, "--jobs", String(jobs)], env);
  await settle();
  const [result] = (
    await runProcess([...system.command, "consume", "--config", config, "--jobs", String(jobs),
      "--max-seconds", String(maxSeconds)], env)
  ).filter((e) => e.event === "result");
  await dropDatabase(db);
  const secs = Math.max(1e-3, (result.end_us - (result.first_us || result.ready_us)) / 1e6);
  return { ...result, secs, perSecond: result.done / secs };
}

// Linear interpolation between the closest ranks (PostgreSQL's
// percentile_cont), of microseconds, in milliseconds.
function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const at = p * (sorted.length - 1);
  const lo = Math.floor(at);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return (sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo)) / 1000;
}

async function latency(system, config) {
  const { db, env, settle } = await freshDatabase(system, config);
  await settle();
  const total = rate * seconds;
  let ready;
  const isReady = new Promise((resolve) => (ready = resolve));
  const consumer = runProcess([...system.command, "consume", "--config", config, "--jobs",
    String(total), "--max-seconds", String(2 * seconds + 30)], env, (e) => e.event === "ready" && ready());
  await Promise.race([isReady, consumer]);
  const [sent] = await runProcess([...system.command, "send", "--config", config, "--rate",
    String(rate), "--seconds", String(seconds)], env);
  const [result] = (await consumer).filter((e) => e.event === "result");
  await dropDatabase(db);
  const sorted = Float64Array.from(result.latencies_us).sort();
  return {
    ...result,
    achieved: sent.jobs / sent.seconds,
    perCall: sent.jobs / (sent.calls || sent.jobs),
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
  };
}

const started = Date.now();
const loadBefore = os.loadavg();
const rows = [];
for (const system of systems) {
  for (const [config, label] of system.configs) {
    process.stderr.write(`peers: ${system.name} ${config}: throughput...`);
    const t = await throughput(system, config);
    process.stderr.write(` ${Math.round(t.perSecond)}/s`);
    // A consumer that drains slower than the offered rate would only show
    // its backlog growing: no latency phase for it.
    let l = null;
    if (t.perSecond >= rate) {
      process.stderr.write("; latency...");
      l = await latency(system, config);
      process.stderr.write(` p50 ${l.p50.toFixed(1)} ms`);
    }
    process.stderr.write("\n");
    rows.push({ system: system.name, config, label, t, l });
  }
}
const loadAfter = os.loadavg();
await admin.end();

const baseline = rows.find((r) => r.system === "graphile-worker" && r.config === "tuned");
const fmt = (v, digits = 0) =>
  Number.isFinite(v) ? v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }) : "-";
const mib = (kib) => fmt(kib / 1024);

console.log(`== peers' benchmark (${process.env.PEERS_VERSIONS || ""})`);
console.log(`   throughput: ${fmt(jobs)} no-op jobs pre-loaded, drained from the first handler call until none is left ` +
  `(capped at ${maxSeconds} s: then what was done by then); latency: ${rate}/s offered for ${seconds} s, open loop, ` +
  `enqueue -> handler start, sent/s = the rate the sender achieved, jobs/call = jobs per enqueue call (jobs due ` +
  `while all ${SENDER_CALLS} calls are busy go together); CPU: the consumer process while draining, in % of one core`);
console.log(`   ${os.cpus().length} cores; load average ${loadBefore.map((v) => v.toFixed(1)).join(" ")} before, ` +
  `${loadAfter.map((v) => v.toFixed(1)).join(" ")} after; ${Math.round((Date.now() - started) / 1000)} s`);
const header = ["system", "configuration", "jobs/s", "vs gw tuned", "CPU", "RSS MiB", "sent/s", "jobs/call", "p50 ms", "p99 ms", "vs gw p50", "vs gw p99", "RSS MiB"];
const table = rows.map(({ system, label, t, l }) => [
  system,
  label,
  fmt(t.perSecond) + (t.capped ? ` (${fmt(t.done)} in ${fmt(t.secs, 1)} s)` : ""),
  baseline ? fmt(t.perSecond / baseline.t.perSecond, 2) + "x" : "-",
  fmt((100 * t.cpu_s) / t.secs) + "%",
  mib(t.peak_rss_kib),
  ...(l
    ? [
        fmt(l.achieved) + (l.achieved < 0.95 * rate ? " (BELOW 95 %)" : ""),
        fmt(l.perCall, 1),
        fmt(l.p50, 1),
        fmt(l.p99, 1),
        baseline?.l ? fmt(l.p50 / baseline.l.p50, 2) + "x" : "-",
        baseline?.l ? fmt(l.p99 / baseline.l.p99, 2) + "x" : "-",
        mib(l.peak_rss_kib) + (l.done < rate * seconds ? ` (${fmt(l.done)} of ${fmt(rate * seconds)} done)` : ""),
      ]
    : [`- (drains < ${rate}/s)`, "-", "-", "-", "-", "-", "-"]),
]);
const widths = header.map((h, i) => Math.max(h.length, ...table.map((r) => r[i].length)));
const line = (cells) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
console.log("   " + " ".repeat(widths[0] + widths[1] + 4) + "-- throughput ".padEnd(widths.slice(2, 6).reduce((a, b) => a + b + 2, -2), "-") +
  "  " + "-- latency ".padEnd(widths.slice(6).reduce((a, b) => a + b + 2, -2), "-"));
console.log("   " + line(header));
for (const r of table) console.log("   " + line(r));
// The targets: each cmdbus configuration against graphile-worker tuned, in
// this run (throughput at least its figure, latency at or below its p50
// and p99).
const verdict = (ok) => (ok ? "MET" : "MISSED");
for (const r of baseline ? rows.filter((x) => x.system === "cmdbus") : []) {
  const ratio = r.t.perSecond / baseline.t.perSecond;
  console.log(`   cmdbus ${r.config}: throughput ${fmt(ratio, 2)}x graphile-worker tuned's: target >= 1.00x ${verdict(ratio >= 1)}`);
  if (r.l && baseline.l) {
    const p50 = r.l.p50 / baseline.l.p50, p99 = r.l.p99 / baseline.l.p99;
    console.log(`   cmdbus ${r.config}: latency p50 ${fmt(p50, 2)}x, p99 ${fmt(p99, 2)}x graphile-worker tuned's: ` +
      `target <= 1.00x ${verdict(p50 <= 1 && p99 <= 1)}`);
  }
}
const cmdbusRss = rows
  .filter((r) => r.system === "cmdbus")
  .flatMap(({ t, l }) => [t.peak_rss_kib, ...(l ? [l.peak_rss_kib] : [])]);
if (cmdbusRss.length > 0) {
  const highest = Math.max(...cmdbusRss) / 1024;
  console.log(`   cmdbus's highest peak RSS ${fmt(highest, 1)} MiB: target <= 64 MiB ${highest <= 64 ? "MET" : "MISSED"}`);
}
