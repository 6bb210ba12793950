// The graphile-worker side of the peers' benchmark (roles: common.mjs).
// Configurations:
//   tuned    the settings of graphile-worker's performance page
//            (24 concurrent jobs, a pool of 25, a local queue of 500) with
//            completion batching off: a job is completed by its own query,
//            as cmdbus completes each command;
//   batched  the same with completeJobBatchDelay / failJobBatchDelay 0, as
//            on that page (completions of the same tick share a query);
//   default  the library's defaults (one job at a time, no local queue).

import { Logger, makeWorkerUtils, run } from "graphile-worker";

import { databaseUrl, run as runSide, SENDER_CALLS } from "./common.mjs";

const task = "noop";

const settings = {
  tuned: {
    concurrentJobs: 24,
    maxPoolSize: 25,
    localQueue: { size: 500 },
    completeJobBatchDelay: -1,
    failJobBatchDelay: -1,
  },
  batched: {
    concurrentJobs: 24,
    maxPoolSize: 25,
    localQueue: { size: 500 },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
  default: {},
};

// Warnings and errors only, on standard error.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning")
    console.error(`graphile-worker ${level}: ${message}`);
});

async function withUtils(fn) {
  const utils = await makeWorkerUtils({ connectionString: databaseUrl(), logger });
  try {
    return await fn(utils);
  } finally {
    await utils.release();
  }
}

runSide({
  name: "graphile-worker",
  configs: Object.keys(settings),
  leftQuery: "SELECT count(*) FROM graphile_worker.jobs",

  setup: () => withUtils((utils) => utils.migrate()),

  // add_jobs in chunks of 10,000 (one statement each).
  preload: (config, jobs) =>
    withUtils(async (utils) => {
      for (let sent = 0; sent < jobs; sent += 10000) {
        const n = Math.min(10000, jobs - sent);
        await utils.addJobs(Array.from({ length: n }, () => ({ identifier: task, payload: {} })));
      }
    }),

  async consume(config, tally) {
    const runner = await run({
      logger,
      noHandleSignals: true,
      preset: { worker: { connectionString: databaseUrl(), ...settings[config] } },
      taskList: { [task]: async (payload) => tally.record(payload) },
    });
    return { stop: () => runner.stop() };
  },

  async sender() {
    const utils = await makeWorkerUtils({ connectionString: databaseUrl(), logger, maxPoolSize: SENDER_CALLS });
    return {
      send: (payload) => utils.addJob(task, payload),
      sendMany: (payloads) => utils.addJobs(payloads.map((payload) => ({ identifier: task, payload }))),
      close: () => utils.release(),
    };
  },
});
