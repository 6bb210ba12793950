// The pg-boss side of the peers' benchmark (roles: common.mjs).
// Configurations:
//   tuned    LISTEN/NOTIFY on (instance and queue), 4 workers in the process
//            each fetching batches of 100 and fetching again at once while
//            batches come back full, polling every 0.5 s (its shortest);
//   default  the library's defaults (one worker fetching one job, polling
//            every 2 s, no NOTIFY).

import { PgBoss } from "pg-boss";

import { databaseUrl, run as runSide, SENDER_CALLS } from "./common.mjs";

const queue = "noop";

const settings = {
  tuned: {
    instance: { useListenNotify: true },
    queue: { notify: true },
    work: {
      localConcurrency: 4,
      batchSize: 100,
      burstWhenBatchFull: true,
      pollingIntervalSeconds: 0.5,
    },
  },
  default: { instance: {}, queue: {}, work: {} },
};

async function started(config, max = 10) {
  const boss = new PgBoss({ connectionString: databaseUrl(), max, ...settings[config].instance });
  boss.on("error", (err) => console.error(`pg-boss error: ${err.stack || err}`));
  await boss.start();
  return boss;
}

async function withBoss(config, fn) {
  const boss = await started(config);
  try {
    return await fn(boss);
  } finally {
    await boss.stop({ graceful: false });
  }
}

runSide({
  name: "pg-boss",
  configs: Object.keys(settings),
  leftQuery: `SELECT count(*) FROM pgboss.job WHERE name = '${queue}'
              AND state IN ('created', 'retry', 'active')`,

  setup: (config) => withBoss(config, (boss) => boss.createQueue(queue, settings[config].queue)),

  // insert() in chunks of 10,000 (one statement each).
  preload: (config, jobs) =>
    withBoss(config, async (boss) => {
      for (let sent = 0; sent < jobs; sent += 10000) {
        const n = Math.min(10000, jobs - sent);
        await boss.insert(queue, Array.from({ length: n }, () => ({ data: {} })));
      }
    }),

  async consume(config, tally) {
    const boss = await started(config);
    await boss.work(queue, settings[config].work, async (jobs) => {
      for (const job of jobs) tally.record(job.data);
    });
    return { stop: () => boss.stop({ graceful: false }) };
  },

  async sender(config) {
    const boss = await started(config, SENDER_CALLS);
    return {
      send: (payload) => boss.send(queue, payload),
      sendMany: (payloads) => boss.insert(queue, payloads.map((data) => ({ data }))),
      close: () => boss.stop({ graceful: false }),
    };
  },
});
