// grpc-js (an independent gRPC implementation) as a client of `kip848 serve`, driven by
// tests/e2e/grpcjs_client.py: one JSON command a line on stdin, one JSON result a line on stdout
// when the command is done (commands run concurrently; each result carries the command's id).
//
//   node driver.js HOST:PORT PROTO_DIR
//
// Commands: {"id", "op": "channel", "name", "options": {grpc-js channel options}}
//           {"id", "op": "unary" | "server_stream" | "bidi", "channel", "method", ...}
//           {"id", "op": "close", "channel"}
// A call names its method as "package.Service/Method": the kip848 services are loaded from
// PROTO_DIR with @grpc/proto-loader (requests and answers as JSON: bytes base64, 64-bit ints as
// strings); any other method takes and gives raw bytes, base64 ("request", "requests").
// Call fields: "request" | "requests", "metadata" [[key, value]] (a "-bin" key's value base64),
// "deadline_ms", "cancel_after_ms", "take" (a stream: cancel after that many messages).
// Result: {"id", "code", "details", "response" | "messages", "ms"}.
"use strict";

const path = require("path");
const readline = require("readline");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const [address, protoDir] = process.argv.slice(2);
const definitions = protoLoader.loadSync(
  ["admin", "classic_group", "consumer_group", "offsets", "testing"].map((n) =>
    path.join(protoDir, "kip848", "v1", `${n}.proto`),
  ),
  { keepCase: true, longs: String, enums: Number, bytes: String, defaults: true, oneofs: true, includeDirs: [protoDir] },
);
const channels = new Map();

function codec(method) {
  const [service, name] = method.split("/");
  const definition = definitions[service] && definitions[service][name];
  if (definition === undefined) {
    return {
      serialize: (b64) => Buffer.from(b64, "base64"),
      deserialize: (buffer) => buffer.toString("base64"),
    };
  }
  return { serialize: definition.requestSerialize, deserialize: definition.responseDeserialize };
}

function metadataOf(pairs) {
  const metadata = new grpc.Metadata();
  for (const [key, value] of pairs || []) {
    metadata.add(key, key.endsWith("-bin") ? Buffer.from(value, "base64") : value);
  }
  return metadata;
}

function emit(result) {
  process.stdout.write(JSON.stringify(result) + "\n");
}

function run(command) {
  const started = Date.now();
  const client = channels.get(command.channel);
  const { serialize, deserialize } = codec(command.method);
  const options = command.deadline_ms ? { deadline: Date.now() + command.deadline_ms } : {};
  const metadata = metadataOf(command.metadata);
  const finish = (error, extra) =>
    emit({
      id: command.id,
      code: error ? error.code : 0,
      details: error ? error.details : "",
      ms: Date.now() - started,
      ...extra,
    });
  const methodPath = "/" + command.method;
  let call;
  if (command.op === "unary") {
    call = client.makeUnaryRequest(
      methodPath, serialize, deserialize, command.request, metadata, options,
      (error, response) => finish(error, { response: error ? null : response }),
    );
  } else {
    const messages = [];
    call =
      command.op === "bidi"
        ? client.makeBidiStreamRequest(methodPath, serialize, deserialize, metadata, options)
        : client.makeServerStreamRequest(methodPath, serialize, deserialize, command.request, metadata, options);
    call.on("data", (message) => {
      messages.push(message);
      if (command.take && messages.length === command.take) call.cancel();
    });
    call.on("error", (error) => finish(error, { messages }));
    call.on("status", (status) => {
      if (status.code === 0) finish(null, { messages });
    });
    if (command.op === "bidi") {
      for (const request of command.requests) call.write(request);
      call.end();
    }
  }
  if (command.cancel_after_ms) setTimeout(() => call.cancel(), command.cancel_after_ms);
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const command = JSON.parse(line);
  try {
    if (command.op === "channel") {
      channels.set(command.name, new grpc.Client(address, grpc.credentials.createInsecure(), command.options || {}));
      emit({ id: command.id, code: 0 });
    } else if (command.op === "close") {
      channels.get(command.channel).close();
      emit({ id: command.id, code: 0 });
    } else {
      run(command);
    }
  } catch (error) {
    emit({ id: command.id, code: -1, details: String(error && error.stack) });
  }
}).on("close", () => {
  // stdin closed: exit once the calls under way are done (the test bounds that)
  for (const client of channels.values()) client.close();
});
