// The official OpenAI SDK for Node against the dashboard's OpenAI-compatible endpoint
// (BASE_URL, with the dashboard token as the key). STEP=answer lists the models, asks WORKBENCH
// for a completion, then asks again while the draft it left waits (DRAFT_EXISTS); STEP=stream
// streams a completion. Prints `RESULT {json}`.
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.TOKEN, maxRetries: 0 });
const model = process.env.WORKBENCH;
const ask = { model, messages: [{ role: 'user', content: 'Write notes on the launch plan' }] };
const result = {};
try {
  if (process.env.STEP === 'answer') {
    result.models = (await client.models.list()).data.map(m => m.id);
    const completion = await client.chat.completions.create(ask);
    result.answer = completion.choices[0].message.content;
    result.finish = completion.choices[0].finish_reason;
    try {
      await client.chat.completions.create(ask);
      result.conflict = 'accepted';
    } catch (error) {
      result.conflict = { status: error.status, code: error.code };
    }
  } else {
    const stream = await client.chat.completions.create({ ...ask, stream: true });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      chunks += 1;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    result.streamed = text;
    result.chunks = chunks;
  }
} catch (error) {
  result.error = String(error);
}
console.log(`RESULT ${JSON.stringify(result)}`);
