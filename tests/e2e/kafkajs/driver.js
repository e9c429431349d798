// KafkaJS (a Kafka client in JavaScript; classic group protocol only) as a consumer of the Kafka
// listener, started by tests/e2e/kafka_clients.py (Fleet, kind "kafkajs") for
// tests/e2e/test_kafkajs.py. It speaks the protocol of tests/e2e/kafka_client_worker.py:
//
//   node driver.js '{"name", "bootstrap", "group", "topics", ...}'
//
// Optional keys: "client_id" (the name unless given), "session_timeout_ms" (6000),
// "heartbeat_interval_ms" (500), "admin" (below).
//
// The application is a careful at-least-once consumer (autoCommit off): KafkaJS has no
// rebalance callbacks, so the consumer owns a group's assignment from its GROUP_JOIN event
// (after SyncGroup) until its REBALANCING event (it is about to join again; eager: everything
// goes) or the next GROUP_JOIN without a partition; it processes a record only while it owns the
// record's partition, and after each batch commits the offsets after the records it processed
// (a failed commit is tried again every 0.5 s for the partitions still owned).
//
// Commands on stdin, one per line: "stop" (stop processing, disconnect: KafkaJS leaves the group;
// exit 0), "hold" (process but commit nothing from now on; answered "held"). stdin closed or
// SIGTERM: stop.
// Events on stdout, one JSON object a line: {"t": CLOCK_MONOTONIC seconds (Python's
// time.monotonic), "name", "event", ...}: "started"; "assign" (partitions [[topic, p]], with the
// GROUP_JOIN's "member_id", "leader", "protocol") / "revoke" (partitions); "records" (records
// [[topic, p, offset, value]]), "commit" (offsets [[topic, p, next offset]]) or "commit-error"
// (error); "stopping" (owns nothing from here on), "closed"; "error" (error), then exit 1.
// Every wait is bounded; the only sockets are KafkaJS's to the bootstrap address and the brokers
// its metadata names.
"use strict";

const readline = require("readline");
const { Kafka, logLevel } = require("kafkajs");

const CLOSE_TIMEOUT_MS = 15000;
const RETRY_MS = 500;

const config = JSON.parse(process.argv[2]);
const name = config.name;

function emit(event, fields) {
  const t = Number(process.hrtime.bigint()) / 1e9;
  process.stdout.write(JSON.stringify({ t, name, event, ...fields }) + "\n");
}

const tpKey = (topic, partition) => JSON.stringify([topic, partition]);
const sortedTps = (keys) => [...keys].map((k) => JSON.parse(k)).sort(compareTp);
function compareTp(a, b) {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1];
}

const owned = new Set(); // tpKey
const uncommitted = new Map(); // tpKey -> next offset
let stopped = false;
let held = false;
let committing = false;
let lastFailure = 0;

const kafka = new Kafka({
  clientId: config.client_id || name,
  brokers: [config.bootstrap],
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: logLevel.ERROR,
  logCreator: () => ({ namespace, label, log }) =>
    process.stderr.write(`${label} [${namespace}] ${JSON.stringify(log)}\n`),
});
const consumer = kafka.consumer({
  groupId: config.group,
  sessionTimeout: config.session_timeout_ms || 6000,
  heartbeatInterval: config.heartbeat_interval_ms || 500,
  rebalanceTimeout: 20000,
  maxWaitTimeInMs: 200,
  retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 1000 },
});

function revoke(keys) {
  for (const k of keys) {
    owned.delete(k);
    uncommitted.delete(k); // not committed: the next owner reads those records again
  }
  emit("revoke", { partitions: sortedTps(keys) });
}

consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
  if (stopped) return;
  const now = new Set();
  for (const [topic, partitions] of Object.entries(payload.memberAssignment)) {
    for (const p of partitions) now.add(tpKey(topic, p));
  }
  const gone = [...owned].filter((k) => !now.has(k));
  if (gone.length) revoke(gone);
  for (const k of now) owned.add(k);
  emit("assign", {
    partitions: sortedTps(now),
    member_id: payload.memberId,
    leader: payload.isLeader,
    protocol: payload.groupProtocol,
  });
});

consumer.on(consumer.events.REBALANCING, () => {
  if (!stopped && owned.size) revoke([...owned]);
});

consumer.on(consumer.events.CRASH, ({ payload }) => {
  if (!stopped) fail(`consumer crashed: ${payload.error && payload.error.stack}`);
});

async function commit() {
  if (committing || held || stopped || uncommitted.size === 0) return;
  if (lastFailure && Date.now() - lastFailure < RETRY_MS) return;
  committing = true;
  const offsets = new Map(uncommitted);
  try {
    await consumer.commitOffsets(
      [...offsets].map(([k, o]) => {
        const [topic, partition] = JSON.parse(k);
        return { topic, partition, offset: String(o) };
      }),
    );
    lastFailure = 0;
    for (const [k, o] of offsets) if (uncommitted.get(k) === o) uncommitted.delete(k);
    emit("commit", {
      offsets: [...offsets].map(([k, o]) => [...JSON.parse(k), o]).sort(compareTp),
    });
  } catch (e) {
    lastFailure = Date.now();
    emit("commit-error", { error: String(e && e.message) });
  } finally {
    committing = false;
  }
}

async function eachBatch({ batch }) {
  if (stopped) return;
  const k = tpKey(batch.topic, batch.partition);
  if (!owned.has(k) || batch.messages.length === 0) return;
  const records = batch.messages.map((m) => [
    batch.topic,
    batch.partition,
    Number(m.offset),
    m.value === null ? "" : m.value.toString(),
  ]);
  emit("records", { records });
  const next = records[records.length - 1][2] + 1;
  uncommitted.set(k, Math.max(uncommitted.get(k) || -1, next));
  await commit();
}

function fail(message) {
  emit("error", { error: message });
  process.exit(1);
}

async function stop() {
  if (stopped) return;
  stopped = true;
  emit("stopping", { partitions: sortedTps(owned) });
  owned.clear();
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no disconnect in ${CLOSE_TIMEOUT_MS} ms`)), CLOSE_TIMEOUT_MS);
  });
  try {
    await Promise.race([consumer.disconnect(), timeout]);
  } catch (e) {
    fail(String(e && e.stack));
  }
  clearTimeout(timer);
  emit("closed", {});
  process.exit(0);
}

// "admin": "reset-offsets" (with "earliest"): KafkaJS's admin.resetOffsets of the group's first
// topic instead of a consumer (it joins the group itself and commits -2, or -1 for the latest,
// to every partition); prints "reset" and "closed", or "error", and exits.
async function resetOffsets() {
  const admin = kafka.admin();
  await admin.connect();
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no reset in ${CLOSE_TIMEOUT_MS} ms`)), CLOSE_TIMEOUT_MS);
  });
  const earliest = Boolean(config.earliest);
  await Promise.race([admin.resetOffsets({ groupId: config.group, topic: config.topics[0], earliest }), timeout]);
  clearTimeout(timer);
  emit("reset", {});
  await admin.disconnect();
  emit("closed", {});
  process.exit(0);
}

async function main() {
  if (config.admin === "reset-offsets") return resetOffsets();
  await consumer.connect();
  for (const topic of config.topics) {
    await consumer.subscribe({ topic, fromBeginning: true });
  }
  await consumer.run({ autoCommit: false, eachBatchAutoResolve: true, eachBatch });
  setInterval(() => void commit(), RETRY_MS / 2).unref();
  emit("started", {});
}

if (config.admin === undefined) {
  const commands = readline.createInterface({ input: process.stdin });
  commands.on("line", (line) => {
    if (line.trim() === "stop") void stop();
    else if (line.trim() === "hold") {
      held = true;
      emit("held", {});
    }
  });
  commands.on("close", () => void stop());
  process.on("SIGTERM", () => void stop());
}
process.on("unhandledRejection", (e) => fail(`unhandled rejection: ${e && e.stack}`));
main().catch((e) => fail(String(e && e.stack)));
