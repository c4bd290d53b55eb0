// The model lists: chat profiles under /v1/models, and one list per other category. Only
// published profiles that can run are listed; listing starts no worker.
// Run: TOKEN=sd-... node examples/models.mjs     (MODEL=<profile name> for another chat profile)
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, MODEL = 'tiny-chat' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

for await (const model of client.models.list()) console.log(model.id); // tiny-chat
console.log(await client.models.retrieve(MODEL)); // { id: 'tiny-chat', object: 'model', created: …, owned_by: 'service-deck' }

// the category lists have no typed method; the client's plain GET reaches them
for (const list of ['/images/models', '/audio/speech/models', '/audio/transcriptions/models']) {
  console.log(list, (await client.get(list)).data.map((m) => m.id)); // [], [ 'speaker' ], [ 'listener' ]
}
