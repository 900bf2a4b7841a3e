// A simulator in Node.js for an external env runner: CartPole, written here, played with the
// server's actions (remote inference). Node's standard library only; no npm package.
//
// Start a server (e.g. `ray-sampler train --env external --external.spaces-from CartPole-v1`), then:
//
//     node examples/external_client.js --address 127.0.0.1:9900 --episodes 10 [--token T] [--seed S]
//
// It prints `episodes N mean_return X` and exits 0, or prints the server's error and exits 1.
// With RAY_SAMPLER_RECORD=path set, it also writes every message it sent, in order, to path (JSON).
// The protocol: a 4-byte big-endian length, then a UTF-8 JSON object with a "type"; one answer per
// message, in order (ray_sampler/client/protocol.py, ray_sampler/sampling/external_service.py).
"use strict";
const fs = require("fs");
const net = require("net");

class ServerError extends Error {}

// PolicyClient's remote-inference calls: startEpisode, getAction, logReturns, endEpisode.
class PolicyClient {
  static async connect(address, token) {
    const i = address.lastIndexOf(":");
    const client = new PolicyClient(address.slice(0, i), Number(address.slice(i + 1)));
    await new Promise((resolve, reject) => {
      client.sock.once("connect", resolve);
      client.sock.once("error", reject);
    });
    client.welcome = await client.call({ type: "hello", protocol: 1, token: token ?? null, inference: "remote" });
    return client;
  }

  constructor(host, port) {
    this.sock = net.createConnection({ host, port, noDelay: true });
    this.buffer = Buffer.alloc(0);
    this.waiting = []; // one {resolve, reject} per message sent, answered in order
    this.unanswered = []; // answers of log_returns, read before the next request
    this.sent = process.env.RAY_SAMPLER_RECORD ? [] : null;
    this.sock.on("data", (data) => this.onData(data));
    this.sock.on("close", () => this.failAll(new Error("the server closed the connection")));
    this.sock.on("error", (e) => this.failAll(e));
  }

  onData(data) {
    this.buffer = Buffer.concat([this.buffer, data]);
    while (this.buffer.length >= 4) {
      const size = this.buffer.readUInt32BE(0);
      if (this.buffer.length < 4 + size) return;
      const answer = JSON.parse(this.buffer.subarray(4, 4 + size).toString("utf8"));
      this.buffer = this.buffer.subarray(4 + size);
      const { resolve, reject } = this.waiting.shift();
      if (answer.type === "error") reject(new ServerError(answer.error));
      else resolve(answer);
    }
  }

  failAll(error) {
    for (const { reject } of this.waiting.splice(0)) reject(error);
  }

  send(message) {
    if (this.sent) this.sent.push(message);
    const body = Buffer.from(JSON.stringify(message), "utf8");
    const header = Buffer.alloc(4);
    header.writeUInt32BE(body.length);
    this.sock.write(Buffer.concat([header, body]));
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async call(message) {
    for (const pending of this.unanswered.splice(0)) await pending; // an error there throws here
    return this.send(message);
  }

  async startEpisode(episodeId) {
    return (await this.call({ type: "start_episode", episode_id: episodeId })).episode_id;
  }

  async getAction(episodeId, observation) {
    return (await this.call({ type: "get_action", episode_id: episodeId, observation })).action;
  }

  logReturns(episodeId, reward) {
    const answer = this.send({ type: "log_returns", episode_id: episodeId, reward });
    answer.catch(() => {}); // awaited by the next call; this only keeps Node from calling it unhandled
    this.unanswered.push(answer);
  }

  async endEpisode(episodeId, observation, truncated) {
    await this.call({ type: "end_episode", episode_id: episodeId, observation, truncated });
  }

  close() {
    if (this.sent) {
      const lines = this.sent.map((message) => JSON.stringify(message)).join(",\n");
      fs.writeFileSync(process.env.RAY_SAMPLER_RECORD, `[\n${lines}\n]\n`); // a JSON list, one message a line
    }
    this.sock.end();
  }
}

// mulberry32: a small seeded PRNG giving floats in [0, 1).
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// CartPole-v1 as gymnasium's: Euler integration, terminated past 2.4 m or 12 degrees, 500 steps at most.
class CartPole {
  constructor(seed) {
    this.random = prng(seed);
  }

  reset() {
    this.state = [0, 0, 0, 0].map(() => this.random() * 0.1 - 0.05);
    this.steps = 0;
    return [...this.state];
  }

  step(action) {
    const [gravity, massCart, massPole, length, forceMag, tau] = [9.8, 1.0, 0.1, 0.5, 10.0, 0.02];
    const totalMass = massCart + massPole;
    const poleMassLength = massPole * length;
    let [x, xDot, theta, thetaDot] = this.state;
    const force = action === 1 ? forceMag : -forceMag;
    const cos = Math.cos(theta);
    const sin = Math.sin(theta);
    const temp = (force + poleMassLength * thetaDot * thetaDot * sin) / totalMass;
    const thetaAcc = (gravity * sin - cos * temp) / (length * (4.0 / 3.0 - (massPole * cos * cos) / totalMass));
    const xAcc = temp - (poleMassLength * thetaAcc * cos) / totalMass;
    x += tau * xDot;
    xDot += tau * xAcc;
    theta += tau * thetaDot;
    thetaDot += tau * thetaAcc;
    this.state = [x, xDot, theta, thetaDot];
    this.steps += 1;
    const terminated = Math.abs(x) > 2.4 || Math.abs(theta) > (12 * 2 * Math.PI) / 360;
    return { observation: [...this.state], reward: 1.0, terminated, truncated: !terminated && this.steps >= 500 };
  }
}

function parseArgs(argv) {
  const args = { address: "127.0.0.1:9900", episodes: "10", token: undefined, seed: "0" };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, "");
    if (!(name in args) || i + 1 >= argv.length) {
      throw new Error("usage: --address HOST:PORT --episodes N [--token T] [--seed S]");
    }
    args[name] = argv[i + 1];
  }
  return { ...args, episodes: Number(args.episodes), seed: Number(args.seed) };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const client = await PolicyClient.connect(args.address, args.token);
  const env = new CartPole(args.seed);
  const returns = [];
  for (let n = 0; n < args.episodes; n++) {
    const episodeId = await client.startEpisode(`node-${args.seed}-${n}`);
    let observation = env.reset();
    let total = 0;
    for (;;) {
      const result = env.step(await client.getAction(episodeId, observation));
      client.logReturns(episodeId, result.reward);
      total += result.reward;
      observation = result.observation;
      if (result.terminated || result.truncated) {
        await client.endEpisode(episodeId, observation, result.truncated);
        break;
      }
    }
    returns.push(total);
  }
  client.close();
  const mean = returns.reduce((a, b) => a + b, 0) / Math.max(returns.length, 1);
  console.log(`episodes ${returns.length} mean_return ${mean}`);
}

main().catch((e) => {
  console.error(`error: ${e.message}`);
  process.exit(1);
});
