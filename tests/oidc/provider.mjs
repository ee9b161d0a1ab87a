// An OpenID Connect provider for the single sign-on tests: node-oidc-provider, configured by a
// JSON file named by the first argument (or the OIDC_PROVIDER_CONFIG variable):
//
//   {"port": 0, "issuer": "http://127.0.0.1:PORT",            (port 0: a free one; issuer: from the port)
//    "clients": [{client_id, client_secret?, redirect_uris, post_logout_redirect_uris, ...}],
//    "accounts": {"alice": {"email": "alice@example.com", "groups": ["team-orders"]}},
//    "claims": {"groups": ["groups"], ...},                     (scope -> claims; added to the defaults)
//    "ttl": {"IdToken": 3600, "AuthorizationCode": 60, "Session": 3600},
//    "conformIdTokenClaims": true}                              (true: scope claims from userinfo only)
//
// Its development login form (devInteractions) takes any password; the login is the account id.
// Consent is given at once. Once listening it prints one line, "listening <issuer>", to stdout.
//
// For the tests only, three routes change it while it runs, and one tells how it was used:
//   PUT /_test/accounts/<id>  {claims}        the account's claims (a group removed, say)
//   PUT /_test/tamper         {"aud": ..., "iss": ..., "nonce": ..., "exp_offset": -3600, "bad_signature": true,
//                              "kid": ...}
//     ID tokens issued from then on carry those claims, signed again with the provider's key
//     (or with another key for bad_signature), their header naming kid when given; {} stops it.
//   PUT /_test/rotate         {"kid": ...}   a new signing key, under the same kid or the one
//     given: ID tokens issued from then on are signed with it and name its kid, and the JWKS
//     (GET /jwks, the discovery document's jwks_uri) serves its public members alone (kty, n,
//     e, kid, alg, use). The provider's own
//     checks of its ID tokens (an id_token_hint at logout) still know the first key only.
//   GET /_test/jwks_reads                     {"reads": n}: how many times the JWKS was read.
import { createSign, generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2] || process.env.OIDC_PROVIDER_CONFIG, 'utf8'));
const accounts = config.accounts || {};
let tamper = {};

function rsaKey(kid) {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { privateKey, jwk: { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' } };
}
let signing = rsaKey('test-signing-key');
const stranger = rsaKey('test-signing-key'); // same kid, another key: a forged signature
const original = signing; // the key the provider itself was made with
let jwksReads = 0;
const JWKS_PATH = '/jwks'; // node-oidc-provider's route for its jwks_uri

function publicJwk({ kty, n, e, kid, alg, use }) {
  return { kty, n, e, kid, alg, use };
}

function signJwt(header, payload, key) {
  const encode = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const input = `${encode(header)}.${encode(payload)}`;
  const signature = createSign('RSA-SHA256').update(input).sign(key).toString('base64url');
  return `${input}.${signature}`;
}

async function readJson(ctx) {
  const chunks = [];
  for await (const chunk of ctx.req) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
}

function start(port) {
  const issuer = config.issuer || `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients: config.clients || [],
    jwks: { keys: [signing.jwk] },
    cookies: { keys: ['a key for the test provider only'] },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name', 'realm_access'],
      groups: ['groups'],
      ...(config.claims || {}),
    },
    conformIdTokenClaims: config.conformIdTokenClaims ?? true,
    features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
    ttl: { IdToken: 3600, AuthorizationCode: 60, Session: 3600, Grant: 3600, Interaction: 600, ...(config.ttl || {}) },
    async findAccount(ctx, id) {
      return {
        accountId: id,
        async claims() { return { ...(accounts[id] || {}), sub: id }; },
      };
    },
    // Consent is given at once for what is asked, so that the login form is the only page.
    async loadExistingGrant(ctx) {
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope(ctx.oidc.params.scope || 'openid');
      await grant.save();
      return grant;
    },
  });
  provider.proxy = true;

  const issue = provider.IdToken.prototype.issue;
  provider.IdToken.prototype.issue = async function issueTampered(options) {
    const token = await issue.call(this, options);
    const rotated = signing !== original;
    if (!options || options.use !== 'idtoken' || (Object.keys(tamper).length === 0 && !rotated)) return token;
    const [header, payload] = token.split('.').slice(0, 2)
      .map((part) => JSON.parse(Buffer.from(part, 'base64url').toString('utf8')));
    for (const claim of ['aud', 'iss', 'nonce']) if (claim in tamper) payload[claim] = tamper[claim];
    if ('exp_offset' in tamper) {
      const now = Math.floor(Date.now() / 1000);
      payload.exp = now + tamper.exp_offset;
      payload.iat = Math.min(payload.iat, payload.exp - 60);
    }
    header.kid = 'kid' in tamper ? tamper.kid : signing.jwk.kid;
    return signJwt(header, payload, (tamper.bad_signature ? stranger : signing).privateKey);
  };

  provider.use(async (ctx, next) => {
    const account = ctx.path.match(/^\/_test\/accounts\/([^/]+)$/);
    if (ctx.method === 'PUT' && account) {
      accounts[decodeURIComponent(account[1])] = await readJson(ctx);
      ctx.status = 204;
      return;
    }
    if (ctx.method === 'PUT' && ctx.path === '/_test/tamper') {
      tamper = await readJson(ctx);
      ctx.status = 204;
      return;
    }
    if (ctx.method === 'PUT' && ctx.path === '/_test/rotate') {
      signing = rsaKey((await readJson(ctx)).kid || original.jwk.kid);
      ctx.status = 204;
      return;
    }
    if (ctx.method === 'GET' && ctx.path === '/_test/jwks_reads') {
      ctx.body = { reads: jwksReads };
      return;
    }
    if (ctx.method === 'GET' && ctx.path === JWKS_PATH) {
      jwksReads += 1;
      if (signing !== original) {
        ctx.body = { keys: [publicJwk(signing.jwk)] };
        ctx.type = 'application/jwk-set+json';
        return;
      }
    }
    await next();
  });

  const server = provider.listen(port, '127.0.0.1', () => {
    process.stdout.write(`listening ${issuer}\n`);
  });
  return server;
}

// Port 0 with the issuer taken from the port: listen first to learn it, then start the provider
// on that port (the issuer is fixed when the provider is made).
if (config.port) {
  start(config.port);
} else {
  const { createServer } = await import('node:net');
  const probe = createServer();
  probe.listen(0, '127.0.0.1', () => {
    const { port } = probe.address();
    probe.close(() => start(port));
  });
}
