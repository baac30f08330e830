// A client this project did not write — nats.js from npm — reads Atelier's event streams the way
// docs/protocol.md tells: the client role's URL (NATS_URL, with its credentials) and inbox
// prefix, an ordered consumer of its own per stream. STREAMS lists `STREAM=SUBJECT` pairs
// (comma-separated). Prints one JSON line per stored message: {stream, subject, contentType,
// data}, where data is the payload parsed as JSON (null when it is not JSON); then `DONE`.
import { connect } from 'nats';

const url = new URL(process.env.NATS_URL);
const nc = await connect({
  servers: `${url.hostname}:${url.port}`,
  user: decodeURIComponent(url.username),
  pass: decodeURIComponent(url.password),
  inboxPrefix: '_INBOX_client',
});
const js = nc.jetstream();
const text = new TextDecoder();
try {
  for (const pair of process.env.STREAMS.split(',')) {
    const [stream, subject] = pair.split('=');
    const consumer = await js.consumers.get(stream, { filterSubjects: [subject] });
    const messages = await consumer.fetch({ max_messages: 1000, expires: 3000 });
    for await (const message of messages) {
      let data = null;
      try { data = JSON.parse(text.decode(message.data)); } catch { data = null; }
      const contentType = message.headers?.get('Content-Type') || null;
      console.log(JSON.stringify({ stream, subject: message.subject, contentType, data }));
      if (message.info.pending === 0) break;
    }
  }
  console.log('DONE');
} finally {
  await nc.close();
}
