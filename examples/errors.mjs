// Errors come as the openai client's error classes, with the OpenAI error body's `code` and
// `param`. Nothing here needs a worker: each request is refused before one would start.
// Run: TOKEN=sd-... node examples/errors.mjs     (MODEL=<profile name> for another chat profile)
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, MODEL = 'tiny-chat' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

// a value the endpoint does not take: 400
try {
  await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], n: 2 });
} catch (error) {
  if (error instanceof OpenAI.BadRequestError) console.log(error.status, error.code, error.param); // 400 invalid_value n
  else throw error;
}

// a model that is not published: 404
try {
  await client.models.retrieve('no-such-profile');
} catch (error) {
  if (error instanceof OpenAI.NotFoundError) console.log(error.status, error.code); // 404 model_not_found
  else throw error;
}

// a wrong token: 401
const stranger = new OpenAI({ baseURL: `${API}/v1`, apiKey: 'sd-not-the-token' });
try {
  await stranger.models.list();
} catch (error) {
  if (error instanceof OpenAI.AuthenticationError) console.log(error.status, error.code); // 401 invalid_api_key
  else throw error;
}
