// A real OpenID Connect provider for tests/e2e/test_oidc.py: the certified
// `oidc-provider` package (npm; scripts/test.sh installs it outside the clone),
// on 127.0.0.1, with one confidential client (the benchlake dashboard) and
// three accounts, and a small login page of its own that checks passwords.
//
//   node oidc_provider.mjs PORT CLIENT_ID CLIENT_SECRET_FILE REDIRECT_URI[,REDIRECT_URI…]
//
// OIDC_PROVIDER_DIR names the directory holding node_modules/oidc-provider.
// Accounts (password = the name + "-password"):
//   alice  groups ["bench-admins", "staff"]   (benchlake maps bench-admins → admin)
//   bob    groups ["staff"]                   (staff → user)
//   carol  groups ["visitors"]                (mapped to nothing: refused)
// Prints "oidc-provider listening on http://127.0.0.1:PORT" when it serves.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [port, clientId, secretFile, redirectUri] = process.argv.slice(2);
if (!port || !clientId || !secretFile || !redirectUri) {
  console.error('usage: oidc_provider.mjs PORT CLIENT_ID CLIENT_SECRET_FILE REDIRECT_URI');
  process.exit(2);
}
const dir = process.env.OIDC_PROVIDER_DIR;
if (!dir) {
  console.error('OIDC_PROVIDER_DIR is not set');
  process.exit(2);
}
const { default: Provider } = await import(
  pathToFileURL(join(dir, 'node_modules', 'oidc-provider', 'lib', 'index.js')).href);

const ACCOUNTS = {
  alice: { name: 'Alice Admin', groups: ['bench-admins', 'staff'] },
  bob: { name: 'Bob User', groups: ['staff'] },
  carol: { name: 'Carol Visitor', groups: ['visitors'] },
};

const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signing = { ...privateKey.export({ format: 'jwk' }), kid: 'e2e-rs256', use: 'sig', alg: 'RS256' };

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: readFileSync(secretFile, 'utf8').trim(),
    redirect_uris: redirectUri.split(','),
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks: { keys: [signing] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'profile', 'groups'],
  pkce: { required: () => true },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    const a = ACCOUNTS[id];
    if (!a) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, name: a.name, groups: a.groups };
      },
    };
  },
  // The dashboard is a first-party client: no consent screen.
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid profile groups');
    grant.addOIDCClaims(['preferred_username', 'name', 'groups']);
    await grant.save();
    return grant;
  },
});

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(uid, error) {
  return `<!doctype html><html><head><meta charset="utf-8"><title>Test IdP sign-in</title></head>
<body><h1>Test IdP</h1>${error ? `<p id="idp-error">${esc(error)}</p>` : ''}
<form method="post" action="/interaction/${esc(uid)}/login">
<label>Username <input name="username" id="username" required autofocus></label>
<label>Password <input type="password" name="password" id="password" required></label>
<button type="submit" id="idp-submit">Sign in</button></form></body></html>`;
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) {
    body += chunk;
    if (body.length > 8192) throw new Error('form too large');
  }
  return new URLSearchParams(body);
}

const callback = provider.callback();
const server = createServer(async (req, res) => {
  const m = /^\/interaction\/([\w-]+)(\/login)?$/.exec(req.url.split('?')[0]);
  if (!m) {
    callback(req, res);
    return;
  }
  try {
    const details = await provider.interactionDetails(req, res);
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(loginPage(details.uid));
      return;
    }
    if (req.method === 'POST' && m[2]) {
      const form = await readForm(req);
      const user = form.get('username') || '';
      if (!ACCOUNTS[user] || form.get('password') !== `${user}-password`) {
        res.writeHead(401, { 'content-type': 'text/html; charset=utf-8' });
        res.end(loginPage(details.uid, 'Wrong username or password.'));
        return;
      }
      await provider.interactionFinished(req, res, { login: { accountId: user } },
        { mergeWithLastSubmission: false });
      return;
    }
    res.writeHead(405);
    res.end();
  } catch (e) {
    res.writeHead(400, { 'content-type': 'text/plain' });
    res.end(`interaction failed: ${e.message}`);
  }
});
server.listen(Number(port), '127.0.0.1', () => {
  console.log(`oidc-provider listening on ${issuer}`);
});
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => server.close(() => process.exit(0)));
}
