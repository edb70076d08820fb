// An address where nothing listens, for tests of a server that cannot be reached. Not a port some
// test server just closed: the OS may hand that port to the next listen(0) at once, another test's
// or chatd's own, and the "unreachable" server then answers (seen in CI: the test's own chatd got
// the closed hub's port and answered its downloads 404). Port 2 is privileged and outside the
// ephemeral range, so no test ever listens there, and not one of the ports fetch() refuses to
// try (port 1 is: "bad port", not a refused connection).
export const REFUSED_URL = 'http://127.0.0.1:2'
