// The dashboard's security headers (@fastify/helmet), stricter than helmet's
// defaults because the pages need so little:
// - CSP: nothing loads unless listed; scripts and styles only from chatd
//   itself (/api/assets), no inline script or style (the pages have none, so
//   an injected one cannot run), forms post only back to chatd, no <base>;
// - no framing at all (frame-ancestors 'none' and X-Frame-Options: DENY): a
//   page that creates and revokes keys must not be clickjacked, and chatd has
//   no page that is meant to be embedded;
// - no referrer: dashboard URLs never reach another site.
// helmet also sends nosniff, HSTS and the cross-origin isolation headers.

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

export async function securityHeaders (app: FastifyInstance): Promise<void> {
  await app.register(helmet, {
    contentSecurityPolicy: { useDefaults: false, directives: CONTENT_SECURITY_POLICY },
    frameguard: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
  })
}
