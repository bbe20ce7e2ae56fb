// Solves a sale path challenge off the page's thread: the first decimal
// nonce from 0 such that SHA-256 of the token's UTF-8 bytes followed by the
// nonce has at least `difficulty` leading zero bits (the service's rule,
// crates/pow). The browser's own SHA-256 (Web Crypto), many digests in
// flight at once: one at a time, each await costs more than the hash.
"use strict";

const IN_FLIGHT = 256;

function leadingZeroBits(bytes) {
  let bits = 0;
  for (const byte of bytes) {
    if (byte === 0) { bits += 8; continue; }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

self.onmessage = async (event) => {
  const { token, difficulty } = event.data;
  const encoder = new TextEncoder();
  const started = performance.now();
  for (let first = 0; ; first += IN_FLIGHT) {
    const digests = [];
    for (let nonce = first; nonce < first + IN_FLIGHT; nonce++) {
      digests.push(crypto.subtle.digest("SHA-256", encoder.encode(token + nonce)));
    }
    const done = await Promise.all(digests);
    for (let i = 0; i < done.length; i++) {
      if (leadingZeroBits(new Uint8Array(done[i])) >= difficulty) {
        const nonce = first + i;
        self.postMessage({ nonce: String(nonce), hashes: nonce + 1, ms: performance.now() - started });
        return;
      }
    }
  }
};
