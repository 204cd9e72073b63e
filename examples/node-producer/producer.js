#!/usr/bin/env node
// An agent that does not embed harness-r1's Python client, producing its trajectories to the
// daemon's trajectory topic by the producer contract in docs/agents.md:
//   topic   $HARNESS_R1_TRAJECTORY_TOPIC (default harness-r1.trajectories)
//   key     none (the daemon ignores keys; our own agents send none)
//   headers none
//   value   one Trajectory JSON object, UTF-8, at most 1 MiB (kafka.max_record_bytes)
//
// Usage:
//   node producer.js [options] [FILE.jsonl]
//     FILE.jsonl   one Trajectory per line, each sent byte for byte (blank lines skipped);
//                  without it, one example trajectory is built and sent
//   --bootstrap HOST:PORT[,HOST:PORT]   default $HARNESS_R1_KAFKA_BOOTSTRAP
//   --topic NAME                        default $HARNESS_R1_TRAJECTORY_TOPIC
//   --compression none|gzip             default none (both are read by the daemon)
//   --schema PATH    validate every record against docs/schemas/trajectory.schema.json first
//   --max-bytes N    the daemon's kafka.max_record_bytes (default 1048576)
//   --dry-run        check only, send nothing
//
// All or nothing: every line is checked before anything is sent, and one bad line (not a JSON
// object, over the size limit, against the schema when --schema is given) sends nothing and
// exits 1, naming the line. What these checks let through and the daemon still refuses goes to
// its dead-letter topic with the reason (`harness-r1 deadletter list`).
// Prints one JSON line per record sent: {"line", "trajectory_id", "partition", "offset"}.

"use strict";

const fs = require("node:fs");
const crypto = require("node:crypto");
const { parseArgs } = require("node:util");
const { Kafka, CompressionTypes, Partitioners, logLevel } = require("kafkajs");

const DEFAULT_TOPIC = "harness-r1.trajectories";
const DEFAULT_MAX_BYTES = 1024 * 1024;
const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP };

function options(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bootstrap: { type: "string", default: process.env.HARNESS_R1_KAFKA_BOOTSTRAP },
      topic: { type: "string", default: process.env.HARNESS_R1_TRAJECTORY_TOPIC || DEFAULT_TOPIC },
      compression: { type: "string", default: "none" },
      schema: { type: "string" },
      "max-bytes": { type: "string", default: String(DEFAULT_MAX_BYTES) },
      "dry-run": { type: "boolean", default: false },
    },
  });
  if (!(values.compression in CODECS)) {
    throw new Error(`--compression ${values.compression}: use one of ${Object.keys(CODECS)}`);
  }
  if (!values["dry-run"] && !values.bootstrap) {
    throw new Error("no broker: pass --bootstrap HOST:PORT or set HARNESS_R1_KAFKA_BOOTSTRAP");
  }
  return { ...values, maxBytes: Number(values["max-bytes"]), file: positionals[0] };
}

// One example trajectory: a failed two-step dbbench episode on the base harness.
function exampleTrajectory() {
  const now = new Date().toISOString();
  return {
    schema_version: "1.0",
    trajectory_id: `node-${crypto.randomUUID()}`,
    agent_id: "node-agent-1",
    target: { model_id: "smollm2-135m", version: "1" },
    harness_version: "base",
    task: {
      schema_version: "1.0",
      env: "dbbench",
      split: "dev",
      task_id: "task-7",
      task_type: "SELECT",
      instruction: "How many rows have a price above 2?",
      seed: 7,
    },
    steps: [
      {
        index: 0,
        observation: "Table t0 has columns id, name, price.",
        raw_output: "Action: Operation\nSELECT COUNT(*) FROM t0 WHERE price > 2",
        action: "SELECT COUNT(*) FROM t0 WHERE price > 2",
        feedback: "[(3,)]",
      },
      {
        index: 1,
        observation: "[(3,)]",
        raw_output: "Final Answer: 4",
        action: "Final Answer: 4",
      },
    ],
    outcome: { success: false, reward: 0.0, termination: "failure", steps: 2 },
    timings: { started_at: now, finished_at: now },
  };
}

// The records to send: [{ line, value: Buffer }] from the file, or the example.
function records(file) {
  if (!file) {
    return [{ line: 0, value: Buffer.from(JSON.stringify(exampleTrajectory()), "utf8") }];
  }
  const text = fs.readFileSync(file);
  const out = [];
  let start = 0;
  let line = 0;
  while (start < text.length) {
    let end = text.indexOf(0x0a, start);
    if (end === -1) end = text.length;
    line += 1;
    let value = text.subarray(start, end);
    if (value.length && value[value.length - 1] === 0x0d) value = value.subarray(0, -1);
    if (value.toString("utf8").trim()) out.push({ line, value: Buffer.from(value) });
    start = end + 1;
  }
  return out;
}

function schemaValidator(path) {
  if (!path) return null;
  const Ajv2020 = require("ajv/dist/2020");
  const addFormats = require("ajv-formats");
  const ajv = new Ajv2020({ allErrors: false, strict: false });
  addFormats(ajv);
  return ajv.compile(JSON.parse(fs.readFileSync(path, "utf8")));
}

// Why a record would be refused before sending, or null.
function problem(record, maxBytes, validate) {
  if (record.value.length > maxBytes) {
    return `too_large: ${record.value.length} bytes, a trajectory may have ${maxBytes}`;
  }
  let doc;
  try {
    doc = JSON.parse(record.value.toString("utf8"));
  } catch (err) {
    return `not_json: ${err.message}`;
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    return "invalid: not a JSON object";
  }
  if (validate && !validate(doc)) {
    const first = validate.errors[0];
    return `invalid: ${first.instancePath || "<root>"} ${first.message}`;
  }
  return null;
}

function trajectoryId(record) {
  return JSON.parse(record.value.toString("utf8")).trajectory_id;
}

async function main() {
  const opts = options(process.argv.slice(2));
  const all = records(opts.file);
  const validate = schemaValidator(opts.schema);
  const bad = all
    .map((record) => ({ line: record.line, why: problem(record, opts.maxBytes, validate) }))
    .filter((r) => r.why !== null);
  for (const { line, why } of bad) console.error(`line ${line}: ${why}`);
  if (bad.length) {
    console.error(`${bad.length} of ${all.length} records refused; nothing sent`);
    return 1;
  }
  if (opts["dry-run"]) {
    console.error(`${all.length} records checked; nothing sent (--dry-run)`);
    return 0;
  }
  const kafka = new Kafka({
    clientId: "harness-r1-node-producer",
    brokers: opts.bootstrap.split(",").map((s) => s.trim()),
    logLevel: logLevel.WARN,
  });
  // No topic auto-creation and (below) acks from every in-sync replica, like harness-r1's own
  // producer; Kafka's default partitioner (records without a key are spread).
  const producer = kafka.producer({
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await producer.connect();
  try {
    for (const record of all) {
      const [meta] = await producer.send({
        topic: opts.topic,
        acks: -1,
        compression: CODECS[opts.compression],
        messages: [{ key: null, value: record.value }],
      });
      const sent = {
        line: record.line,
        trajectory_id: trajectoryId(record),
        partition: meta.partition,
        offset: Number(meta.baseOffset),
      };
      console.log(JSON.stringify(sent));
    }
  } finally {
    await producer.disconnect();
  }
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    console.error(`error: ${err.message}`);
    process.exitCode = 2;
  },
);
