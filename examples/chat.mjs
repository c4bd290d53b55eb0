// One chat answer from the openai client. Against `npm run demo` the model is `tiny-chat`, whose
// weights are random: its text is noise that runs to max_tokens, but the usage and timings are real.
// Run: TOKEN=sd-... node examples/chat.mjs     (MODEL=<profile name> for another chat profile)
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, MODEL = 'tiny-chat' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

console.log((await client.models.list()).data.map((m) => m.id)); // [ 'tiny-chat' ]

const answer = await client.chat.completions.create({
  model: MODEL,
  messages: [{ role: 'user', content: 'Hello' }],
  max_tokens: 32,
});
console.log(answer.usage);
console.log(answer.choices[0].message.content);
