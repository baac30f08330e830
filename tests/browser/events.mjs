// A client this project did not write — nats.js from npm — reads Atelier's events the way
// docs/protocol.md tells: the client role's URL (NATS_URL, with its credentials) and inbox
// prefix, and the `atelier.ctl.events` verb in JSON, a page after the last sequence seen, until
// a page brings nothing new. STREAMS lists `STREAM=FILTER` pairs (comma-separated; STREAM is
// jobs, workshop or batches). Prints one JSON line per event: {stream, seq, subject, data};
// then `DONE`.
import { connect, headers } from 'nats';

const url = new URL(process.env.NATS_URL);
const nc = await connect({
  servers: `${url.hostname}:${url.port}`,
  user: decodeURIComponent(url.username),
  pass: decodeURIComponent(url.password),
  inboxPrefix: '_INBOX_client',
});
const text = new TextDecoder();
const json = headers();
json.set('Content-Type', 'application/json');
try {
  for (const pair of process.env.STREAMS.split(',')) {
    const [stream, filter] = pair.split('=');
    let after = 0;
    for (;;) {
      const request = JSON.stringify({ v: 1, stream, filter, after });
      const reply = await nc.request('atelier.ctl.events', request, { headers: json, timeout: 10000 });
      const answer = JSON.parse(text.decode(reply.data));
      if (answer.error) throw new Error(`${answer.error.code}: ${answer.error.message}`);
      const page = answer.ok;
      for (const event of page.events) {
        console.log(JSON.stringify({ stream, seq: event.seq, subject: event.subject, data: event.event }));
      }
      if (page.events.length === 0 && page.scanned_to === after) break;
      after = page.scanned_to;
    }
  }
  console.log('DONE');
} finally {
  await nc.close();
}
