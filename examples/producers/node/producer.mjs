// Send three articles to simdedup and print their verdicts.
//
//   npm ci
//   node producer.mjs [REDIS_URL] [NAMESPACE]
//
// REDIS_URL (a node, any node of a Redis Cluster or several comma-separated,
// or redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER) defaults to $REDIS_URL
// or redis://127.0.0.1:6379/0, NAMESPACE to "default". A `simdedup worker`
// must be running on the same Redis and namespace. Prints one line per
// article: id, verdict, dup_of (or the code).
import { createClient, createCluster } from 'redis';

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

const url = process.argv[2] ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379/0';
const ns = process.argv[3] ?? 'default';
const input = `simdedup:{${ns}}:in`;
const output = `simdedup:{${ns}}:out`;

const articles = [
  ['js-1', 'The city orchestra announced on Thursday that its new concert hall will open in October ' +
    'with a free weekend of rehearsals open to the public and a season of twelve premieres.'],
  // The same article in markup: expected duplicate of js-1.
  ['js-1-copy', '<section><p>The city orchestra announced on Thursday that its new concert hall will open ' +
    'in October with a free weekend of rehearsals open to the public and a season of twelve premieres.</p></section>'],
  ['js-2', 'Engineers finished testing the replacement cable of the cross-channel power link, ' +
    'which will carry electricity again from next Monday, the grid operator said.'],
];

const client = await connect(url);

// Read verdicts from here on: the newest output entry before sending.
const newest = await client.xRevRange(output, '+', '-', { COUNT: 1 });
let last = newest.length > 0 ? newest[0].id : '0-0';

// XADD returns the entry id: the `source` field of its verdict.
const order = [];
for (const [id, text] of articles) {
  order.push(await client.xAdd(input, '*', { id, text }));
}

const verdicts = new Map();
const deadline = Date.now() + 60_000;
while (verdicts.size < order.length) {
  if (Date.now() > deadline) {
    console.error(`timed out: ${verdicts.size} of ${order.length} verdicts (is a worker running on namespace ${ns}?)`);
    process.exit(1);
  }
  const reply = await client.xRead({ key: output, id: last }, { COUNT: 100, BLOCK: 1000 });
  for (const stream of reply ?? []) {
    for (const { id, message } of stream.messages) {
      last = id;
      if (order.includes(message.source)) verdicts.set(message.source, message);
    }
  }
}
for (const source of order) { // in sending order
  const v = verdicts.get(source);
  console.log(v.id, v.verdict, v.dup_of ?? v.code ?? '-');
}
await client.quit();
