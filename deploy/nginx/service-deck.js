// Several Service Deck nodes behind one nginx (njs 0.7 or newer; Debian: libnginx-mod-http-js).
// service-deck.conf.template wires it: one API token in front (its SHA-256 in $sd_token_sha256),
// the nodes named in $sd_nodes, each node's address and own token in two maps.
//
// route:  /v1/* goes to the node that publishes the request's `model` in the route's category,
//         read from a JSON body, a multipart form (image edits, transcriptions) or the path
//         (/v1/models/<model>). The node is found by asking every node for that category's model
//         list; the first node in $sd_nodes that lists it wins. `service-image` and any direct
//         image profile name go to the first node that publishes an image profile. A request
//         without a readable model goes to the first node, which answers its own validation error.
//         The request itself is then handed to nginx's proxy (an internal redirect), so answers,
//         SSE streams included, pass through unbuffered.
// models: the four model lists, merged over the nodes (first node wins a duplicate name).
// health: every node's /health; 200 when all answer 200.
import crypto from 'crypto';

const LISTS = {
  chat: '/v1/models',
  image: '/v1/images/models',
  tts: '/v1/audio/speech/models',
  stt: '/v1/audio/transcriptions/models',
};

// How each routed request names its model: where it is read and in which category it is looked up.
const ROUTES = {
  'POST /v1/chat/completions': { category: 'chat', body: 'json' },
  'POST /v1/images/generations': { category: 'image', body: 'json' },
  'POST /v1/images/edits': { category: 'image', body: 'multipart' },
  'POST /v1/audio/speech': { category: 'tts', body: 'json' },
  'POST /v1/audio/transcriptions': { category: 'stt', body: 'multipart' },
};

const IMAGE_ALIAS = 'service-image';

function sendError(r, status, type, code, message, param) {
  r.headersOut['Content-Type'] = 'application/json; charset=utf-8';
  r.return(status, JSON.stringify({ error: { message: message, type: type, param: param === undefined ? null : param, code: code } }));
}

function nodes(r) {
  return (r.variables.sd_nodes || '').split(/\s+/).filter((name) => name !== '');
}

// The client's bearer token against the one API token in front (compared as SHA-256 digests, so
// only the digest sits in the configuration). Answers 401 itself and returns false when it fails.
function authorized(r) {
  const header = r.headersIn.Authorization || '';
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) {
    r.headersOut['WWW-Authenticate'] = 'Bearer';
    sendError(r, 401, 'authentication_error', 'invalid_api_key', 'Missing or invalid bearer token in the Authorization header.');
    return false;
  }
  const digest = crypto.createHash('sha256').update(match[1]).digest('hex');
  const expected = (r.variables.sd_token_sha256 || '').toLowerCase();
  let difference = digest.length === expected.length ? 0 : 1;
  for (let i = 0; i < digest.length && i < expected.length; i += 1) difference |= digest.charCodeAt(i) ^ expected.charCodeAt(i);
  if (difference !== 0) {
    r.headersOut['WWW-Authenticate'] = 'Bearer';
    sendError(r, 401, 'authentication_error', 'invalid_api_key', 'Invalid API token.');
    return false;
  }
  return true;
}

// One node's answer to a GET of `path` (a model list or /health): { node, status, body }, status 0
// when the node could not be asked.
function ask(r, node, path) {
  return r.subrequest(`/_sd/list/${node}${path}`, { method: 'GET' }).then(
    (reply) => {
      let body = null;
      try {
        body = JSON.parse(reply.responseText || '');
      } catch (error) {
        body = null;
      }
      if (reply.status !== 200) r.warn(`service-deck: node ${node} answered ${path} with ${reply.status}`);
      return { node: node, status: reply.status, body: body };
    },
    (error) => {
      r.warn(`service-deck: node ${node} could not be asked for ${path}: ${error}`);
      return { node: node, status: 0, body: null };
    },
  );
}

function listIds(answer) {
  if (answer.status !== 200 || !answer.body || !Array.isArray(answer.body.data)) return null;
  return answer.body.data.map((entry) => entry && entry.id);
}

// The `model` field of a multipart form: the first part whose Content-Disposition names `model`.
function multipartModel(r, body) {
  const type = r.headersIn['Content-Type'] || '';
  const match = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(type);
  if (!match || !body) return undefined;
  const delimiter = Buffer.from(`--${match[1] || match[2]}`);
  let at = body.indexOf(delimiter);
  while (at >= 0) {
    const headersStart = at + delimiter.length + 2;
    const headersEnd = body.indexOf('\r\n\r\n', headersStart);
    if (headersEnd < 0) return undefined;
    const next = body.indexOf(delimiter, headersEnd + 4);
    if (next < 0) return undefined;
    const headers = body.toString('utf8', headersStart, headersEnd);
    if (/^content-disposition:[^\r\n]*;\s*name="model"/im.test(headers)) return body.toString('utf8', headersEnd + 4, next - 2);
    at = next;
  }
  return undefined;
}

function requestedModel(r, route) {
  if (route.body === 'multipart') return multipartModel(r, r.requestBuffer);
  try {
    const parsed = JSON.parse(r.requestText || '');
    return parsed && typeof parsed.model === 'string' ? parsed.model : undefined;
  } catch (error) {
    return undefined;
  }
}

function forward(r, node) {
  const query = r.variables.args ? `?${r.variables.args}` : '';
  r.internalRedirect(`/_sd/node/${node}${encodeURI(r.uri)}${query}`);
}

function notFound(r, category, model) {
  const message =
    category === 'image'
      ? `No node publishes an image profile: '${IMAGE_ALIAS}' names the published one; the operator publishes one on a node.`
      : `The model '${model}' is not published on any node (the ${category} models: GET ${LISTS[category]}).`;
  sendError(r, 404, 'invalid_request_error', 'model_not_found', message, 'model');
}

async function route(r) {
  if (!authorized(r)) return;
  const names = nodes(r);
  if (names.length === 0) return sendError(r, 500, 'server_error', 'no_nodes', 'No node is configured: $sd_nodes is empty.');
  const retrieve = r.method === 'GET' ? /^\/v1\/models\/(.+)$/.exec(r.uri) : null;
  const spec = retrieve ? { category: 'chat' } : ROUTES[`${r.method} ${r.uri}`];
  if (!spec) return forward(r, names[0]);
  const model = retrieve ? retrieve[1] : requestedModel(r, spec);
  if (model === undefined || model === '') return forward(r, names[0]);

  const answers = await Promise.all(names.map((node) => ask(r, node, LISTS[spec.category])));
  const wanted = spec.category === 'image' ? IMAGE_ALIAS : model;
  const holder = answers.find((answer) => {
    const ids = listIds(answer);
    return ids !== null && ids.indexOf(wanted) >= 0;
  });
  if (holder) return forward(r, holder.node);
  const silent = answers.filter((answer) => listIds(answer) === null);
  if (silent.length > 0) {
    const which = silent.map((answer) => `${answer.node} (${answer.status === 0 ? 'no answer' : `HTTP ${answer.status}`})`).join(', ');
    return sendError(r, 502, 'server_error', 'node_unreachable', `The model '${model}' is on no node that answered; not answering: ${which}.`);
  }
  return notFound(r, spec.category, model);
}

async function models(r) {
  if (!authorized(r)) return;
  // Lists are read with GET; any other method gets the first node's own answer to it.
  if (r.method !== 'GET') return forward(r, nodes(r)[0]);
  const answers = await Promise.all(nodes(r).map((node) => ask(r, node, r.uri)));
  const seen = {};
  const data = [];
  const silent = [];
  answers.forEach((answer) => {
    if (listIds(answer) === null) return silent.push(answer.node);
    answer.body.data.forEach((entry) => {
      if (seen[entry.id]) return;
      seen[entry.id] = true;
      data.push(entry);
    });
  });
  if (answers.length > 0 && silent.length === answers.length) {
    return sendError(r, 502, 'server_error', 'node_unreachable', `No node answered ${r.uri}: ${silent.join(', ')}.`);
  }
  if (silent.length > 0) r.headersOut['X-Service-Deck-Nodes-Missing'] = silent.join(' ');
  r.headersOut['Content-Type'] = 'application/json; charset=utf-8';
  r.return(200, JSON.stringify({ object: 'list', data: data }));
}

async function health(r) {
  if (!authorized(r)) return;
  const answers = await Promise.all(nodes(r).map((node) => ask(r, node, '/health')));
  const each = {};
  answers.forEach((answer) => (each[answer.node] = { status: answer.status, endpoint: answer.body && answer.body.endpoint }));
  const ok = answers.length > 0 && answers.every((answer) => answer.status === 200);
  r.headersOut['Content-Type'] = 'application/json; charset=utf-8';
  r.return(ok ? 200 : 502, JSON.stringify({ status: ok ? 'ok' : 'degraded', nodes: each }));
}

export default { route, models, health };
