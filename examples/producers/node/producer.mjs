// Send three articles to simdedup and print their verdicts.
//
//   npm ci
//   node producer.mjs [REDIS_URL] [NAMESPACE]
//
// REDIS_URL defaults to $REDIS_URL or redis://127.0.0.1:6379/0, NAMESPACE to
// "default". A `simdedup worker` must be running on the same Redis and
// namespace. Prints one line per article: id, verdict, dup_of (or the code).
import { createClient } from 'redis';

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

const client = createClient({ url });
client.on('error', (err) => console.error('redis:', err.message));
await client.connect();

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
