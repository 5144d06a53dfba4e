// Read simdedup's verdicts as one downstream service, each exactly once.
//
//   npm ci
//   node reader.mjs [REDIS_URL] [NAMESPACE] [GROUP] [CONSUMER] [ARTICLES.jsonl]
//
// REDIS_URL (a node, any node of a Redis Cluster or several comma-separated,
// or redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER) defaults to $REDIS_URL
// or redis://127.0.0.1:6379/0, NAMESPACE to "default", GROUP to "reader",
// CONSUMER to "reader-1". ARTICLES.jsonl is what the producer sent, one
// {"id", "text", ["title"]} object a line: each verdict is joined to its
// article by `id`.
//
// The pattern (docs/protocol.md, "Reading verdicts"):
// - The service reads simdedup:{NS}:out with a consumer group of its own, so
//   that every other service with its own group reads every verdict too.
// - It handles a batch, then acknowledges it. Here handling means appending one
//   JSON record per verdict to the list reader:{NS}:GROUP, in the same
//   MULTI/EXEC as the XACK: the record and the acknowledgement happen together
//   or not at all, so a reader killed at any moment and restarted handles every
//   verdict exactly once. A service whose effect lives elsewhere makes it
//   idempotent on the verdict's `source` instead (an upsert keyed by it), then
//   acknowledges.
// - On start it first re-reads its own pending entries (delivered before a
//   crash, never acknowledged), then new ones.
// Runs until killed; prints what it handled, one line per verdict.
import { readFileSync } from 'node:fs';
import { createClient, createCluster } from 'redis';

const CONTRACT_VERSION = '1';

// A connected client for REDIS_URL: one node; a Redis Cluster, found by asking
// the first node given (the cluster client then sends every command to the
// node that owns its key, following MOVED); or, for
// redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB], the
// primary that the first sentinel to answer names. It is asked once: after a
// failover the old primary's errors stop the program, and run again it asks
// the sentinels anew.
async function connect(url) {
  let options = {};
  const sentinel = /^(rediss?)\+sentinel:\/\/(?:(.*)@)?([^/@]+)\/([^/?]+)(?:\/(\d+))?(?:\?.*)?$/.exec(url);
  if (sentinel) {
    const [, scheme, creds, hosts, master, db = '0'] = sentinel;
    url = null;
    for (const hostPort of hosts.split(',')) {
      const [, host, port = '26379'] = /^(.*?)(?::(\d+))?$/.exec(hostPort);
      const s = createClient({ socket: { host, port: +port, tls: scheme === 'rediss', reconnectStrategy: false } });
      s.on('error', () => {}); // one that does not answer: ask the next
      const addr = await s.connect()
        .then(() => s.sendCommand(['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', master]))
        .catch(() => null);
      await s.disconnect().catch(() => {});
      if (!addr) continue;
      const h = addr[0].includes(':') ? `[${addr[0]}]` : addr[0]; // IPv6
      url = `${scheme}://${creds ? `${creds}@` : ''}${h}:${addr[1]}/${db}`;
      break;
    }
    if (!url) throw new Error(`no sentinel of ${hosts} names a primary for ${master}`);
    options = { socket: { reconnectStrategy: false } }; // a lost primary is an error
  }
  const seeds = url.split(',');
  const client = createClient({ url: seeds[0], ...options });
  client.on('error', (err) => console.error('redis:', err.message));
  await client.connect();
  if (sentinel || !/^cluster_enabled:1/m.test(await client.info('cluster'))) return client;
  await client.quit();
  // Every node is reached with the credentials (and TLS) of the first URL.
  const first = new URL(seeds[0]);
  const cluster = createCluster({
    rootNodes: seeds.map((seed) => ({ url: seed })),
    defaults: {
      username: decodeURIComponent(first.username) || undefined,
      password: decodeURIComponent(first.password) || undefined,
      socket: { tls: first.protocol === 'rediss:' },
    },
  });
  cluster.on('error', (err) => console.error('redis:', err.message));
  await cluster.connect();
  return cluster;
}

const [urlArg, nsArg, groupArg, consumerArg, articlesPath] = process.argv.slice(2);
const url = urlArg || process.env.REDIS_URL || 'redis://127.0.0.1:6379/0';
const ns = nsArg || 'default';
const group = groupArg || 'reader';
const consumer = consumerArg || 'reader-1';
const out = `simdedup:{${ns}}:out`;
// Same hash tag as the output stream: one Redis Cluster node holds both, so one
// transaction may write the record and acknowledge the verdict.
const handled = `reader:{${ns}}:${group}`;

// What this service produced, by article id.
const articles = new Map();
if (articlesPath) {
  for (const line of readFileSync(articlesPath, 'utf8').split('\n')) {
    if (line.trim()) {
      const a = JSON.parse(line);
      articles.set(a.id, a);
    }
  }
}

const client = await connect(url);

try {
  // From the start of the retained verdicts ('$' would take only new ones).
  await client.xGroupCreate(out, group, '0', { MKSTREAM: true });
} catch (err) {
  if (!String(err.message).includes('BUSYGROUP')) throw err;
}

// XREADGROUP sent as is: a pending entry trimmed from the stream comes back
// with no fields (null), which the client's own reply parser does not take.
async function readGroup(cursor) {
  const args = ['XREADGROUP', 'GROUP', group, consumer, 'COUNT', '100'];
  if (cursor === '>') args.push('BLOCK', '2000');
  args.push('STREAMS', out, cursor);
  // A cluster client (it has `masters`) is told the key that routes a command.
  const reply = await ('masters' in client ? client.sendCommand(out, false, args) : client.sendCommand(args));
  if (!reply || reply.length === 0) return [];
  return reply[0][1].map(([id, flat]) => {
    if (flat === null) return [id, null];
    const fields = {};
    for (let i = 0; i < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
    return [id, fields];
  });
}

// The service's own record of one verdict, joined to the article it produced.
function handle(entryId, fields) {
  if (fields === null) {
    // Pending, but trimmed from the stream (output_maxlen) before it was
    // handled: the verdict is lost to this reader.
    return { entry: entryId, lost: 'trimmed before it was handled' };
  }
  if (fields.v !== CONTRACT_VERSION) {
    return { entry: entryId, unread: `contract version ${fields.v}` };
  }
  const record = { entry: entryId, source: fields.source, id: fields.id, verdict: fields.verdict };
  if (fields.dup_of !== undefined) record.dup_of = fields.dup_of;
  if (fields.code !== undefined) record.code = fields.code;
  const article = articles.get(fields.id);
  if (article !== undefined) record.title = article.title;
  return record;
}

// First this consumer's pending entries (delivered, never acknowledged), page
// after page from '0'; once none are left, new entries ('>').
let cursor = '0';
for (;;) {
  const entries = await readGroup(cursor);
  if (cursor !== '>') {
    if (entries.length === 0) {
      cursor = '>';
      continue;
    }
    cursor = entries[entries.length - 1][0];
  }
  if (entries.length === 0) continue;
  const records = entries.map(([id, fields]) => JSON.stringify(handle(id, fields)));
  // Handled and acknowledged in one transaction.
  await client
    .multi()
    .rPush(handled, records)
    .xAck(out, group, entries.map(([id]) => id))
    .exec();
  for (const record of records) console.log(record);
}
