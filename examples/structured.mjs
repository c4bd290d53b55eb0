// Structured output and reasoning effort. A json_schema response format makes the worker's grammar
// hold the answer to the schema, so even the demo's `tiny-chat` (random weights) answers with
// valid JSON. reasoning_effort is passed to the model's chat template, and three headers say what
// the worker got.
// Run: TOKEN=sd-... node examples/structured.mjs     (MODEL=<profile name> for another chat profile)
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, MODEL = 'tiny-chat' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

// structured output: the worker's grammar holds the answer to the schema
const picked = await client.chat.completions.create({
  model: MODEL,
  messages: [{ role: 'user', content: 'Yes or no?' }],
  response_format: {
    type: 'json_schema',
    json_schema: {
      name: 'pick',
      schema: { type: 'object', properties: { pick: { type: 'string', enum: ['yes', 'no'] } }, required: ['pick'] },
    },
  },
  max_tokens: 200,
});
console.log(JSON.parse(picked.choices[0].message.content)); // { pick: 'yes' }

// reasoning effort, and the headers that say what the worker got
const { data, response } = await client.chat.completions
  .create({ model: MODEL, messages: [{ role: 'user', content: 'Think.' }], reasoning_effort: 'high', max_tokens: 16 })
  .withResponse();
console.log(response.headers.get('x-service-reasoning-effective')); // high
console.log(data.choices[0].message.content);
