// The dashboard's security headers (@fastify/helmet), stricter than helmet's
// defaults because the pages need so little:
// - CSP: nothing loads unless listed; scripts and styles only from chatd
//   itself (/api/assets), no inline script or style (the pages have none, so
//   an injected one cannot run), forms post only back to chatd, no <base>;
// - no framing at all (frame-ancestors 'none' and X-Frame-Options: DENY): a
//   page that creates and revokes keys must not be clickjacked, and chatd has
//   no page that is meant to be embedded;
// - no referrer: dashboard URLs never reach another site.
// helmet also sends nosniff and the cross-origin isolation headers. HSTS is
// not helmet's: it is sent on every response that came over HTTPS, and only
// then (api/baseline-headers.ts).
//
// /docs (swagger-ui) gets the same headers with a CSP that fits swagger-ui's
// own files: its scripts and styles from chatd, the data: icons its
// stylesheet uses, and fetching the OpenAPI document from chatd.

import type { FastifyInstance } from 'fastify'
import helmet from '@fastify/helmet'

export const CONTENT_SECURITY_POLICY = {
  defaultSrc: ["'none'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'"],
  // The charts are inline <svg> elements, not images; 'self' leaves room for a favicon.
  imgSrc: ["'self'"],
  formAction: ["'self'"],
  frameAncestors: ["'none'"],
  baseUri: ["'none'"],
  objectSrc: ["'none'"],
  // No upgrade-insecure-requests: behind TLS, HSTS does the upgrading; on plain-HTTP localhost it would break every form post.
}

export const DOCS_CONTENT_SECURITY_POLICY = {
  ...CONTENT_SECURITY_POLICY,
  imgSrc: ["'self'", 'data:'],
  fontSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
}

async function withHelmet (app: FastifyInstance, directives: Record<string, string[]>): Promise<void> {
  await app.register(helmet, {
    contentSecurityPolicy: { useDefaults: false, directives },
    frameguard: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    hsts: false,
  })
}

export async function securityHeaders (app: FastifyInstance): Promise<void> {
  await withHelmet(app, CONTENT_SECURITY_POLICY)
}

export async function docsSecurityHeaders (app: FastifyInstance): Promise<void> {
  await withHelmet(app, DOCS_CONTENT_SECURITY_POLICY)
}
