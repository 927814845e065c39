// A real OpenID Connect provider for the console's tests: the npm package oidc-provider, configured
// from OIDC_TEST_CONFIG (JSON: port, clients, accounts by login). Its development login form takes
// any password for a known login; consent is given once for the client's scopes. Each account's
// claims may carry https://slack.com/user_id, as Sign in with Slack's ID tokens do.
import { pathToFileURL } from 'node:url';

// Installed under the folder OIDC_PROVIDER_DIR names (npm install --prefix <it> oidc-provider@<pinned>).
const { default: Provider } = await import(
  pathToFileURL(`${process.env.OIDC_PROVIDER_DIR}/node_modules/oidc-provider/lib/index.js`).href);

const config = JSON.parse(process.env.OIDC_TEST_CONFIG);
const accounts = config.accounts;
const SLACK_CLAIMS = ['https://slack.com/user_id', 'https://slack.com/team_id'];

const provider = new Provider(`http://127.0.0.1:${config.port}`, {
  clients: config.clients.map((c) => ({
    client_id: c.client_id, client_secret: c.client_secret, redirect_uris: c.redirect_uris,
    grant_types: ['authorization_code'], response_types: ['code'], require_auth_time: true,
  })),
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', ...SLACK_CLAIMS] },
  conformIdTokenClaims: false, // the claims in the ID token itself, as Slack's and most issuers' are
  cookies: { keys: ['signoff-test-provider-cookie-key'] },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    if (!accounts[id]) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...accounts[id] }; } };
  },
  async loadExistingGrant(ctx) {
    const clientId = ctx.oidc.client.clientId;
    const found = ctx.oidc.session.grantIdFor(clientId);
    if (found) return ctx.oidc.provider.Grant.find(found);
    const grant = new ctx.oidc.provider.Grant({ clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile');
    grant.addOIDCClaims(['email', 'email_verified', 'name', ...SLACK_CLAIMS]);
    await grant.save();
    return grant;
  },
});
provider.listen(config.port, '127.0.0.1', () => console.log(`listening ${config.port}`));
