/* Keyed BLAKE2b (RFC 7693) of a canonical form, for _plain_check.c's one-call fingerprint.
 *
 * The fingerprint of a raw payload is the hex BLAKE2b-128 digest, keyed with the process's (or a
 * fingerprinter's) key, of the tool's prefix followed by the canonical form: what hashlib computes
 * for fingerprint.Fingerprinter. hashlib's object is built once per fingerprinter and copied per
 * digest; from C, its copy, update and hexdigest cost as much again as the hashing, and a result's
 * state (no prefix) compresses its key block at every digest. Here a "seed" (bytes: the key's
 * length, the key, the prefix) names a state kept ready: the key block compressed (a message
 * always follows it: a form is never empty) and the prefix taken in. A digest copies it, takes the
 * form in and finishes. The states are kept for the last SEEDS seeds, each held (strongly) so that
 * its address names no other. Tests compare the digests with hashlib's on generated keys,
 * prefixes and messages.
 */
#include <stdint.h>

#define BLOCK 128
#define SEEDS 16

typedef struct {
    uint64_t h[8];
    uint64_t counter;      /* bytes compressed so far (a form never reaches 2**64) */
    uint8_t buffer[BLOCK]; /* taken in, not compressed yet: the last block waits for the final flag */
    size_t buffered;
} Blake2b;

static const uint64_t blake2b_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t blake2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static uint64_t
rotate_right(uint64_t word, int bits)
{
    return (word >> bits) | (word << (64 - bits));
}

static uint64_t
little_endian_word(const uint8_t *bytes)
{
    uint64_t word = 0;
    for (int i = 7; i >= 0; i--)
        word = (word << 8) | bytes[i];
    return word;
}

#define MIX(a, b, c, d, x, y)                                                                                      \
    do {                                                                                                         \
        v[a] = v[a] + v[b] + (x);                                                                                \
        v[d] = rotate_right(v[d] ^ v[a], 32);                                                                    \
        v[c] = v[c] + v[d];                                                                                      \
        v[b] = rotate_right(v[b] ^ v[c], 24);                                                                    \
        v[a] = v[a] + v[b] + (y);                                                                                \
        v[d] = rotate_right(v[d] ^ v[a], 16);                                                                    \
        v[c] = v[c] + v[d];                                                                                      \
        v[b] = rotate_right(v[b] ^ v[c], 63);                                                                    \
    } while (0)

static void
compress(Blake2b *state, const uint8_t *block, int last)
{
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++)
        m[i] = little_endian_word(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = state->h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= state->counter; /* (the counter's high word stays 0) */
    if (last)
        v[14] = ~v[14];
    for (int round = 0; round < 12; round++) {
        const uint8_t *s = blake2b_sigma[round];
        MIX(0, 4, 8, 12, m[s[0]], m[s[1]]);
        MIX(1, 5, 9, 13, m[s[2]], m[s[3]]);
        MIX(2, 6, 10, 14, m[s[4]], m[s[5]]);
        MIX(3, 7, 11, 15, m[s[6]], m[s[7]]);
        MIX(0, 5, 10, 15, m[s[8]], m[s[9]]);
        MIX(1, 6, 11, 12, m[s[10]], m[s[11]]);
        MIX(2, 7, 8, 13, m[s[12]], m[s[13]]);
        MIX(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++)
        state->h[i] ^= v[i] ^ v[i + 8];
}

#undef MIX

/* Take `length` bytes in; a full buffer is compressed only once more bytes follow it. */
static void
absorb(Blake2b *state, const uint8_t *data, size_t length)
{
    while (length > 0) {
        if (state->buffered == BLOCK) {
            state->counter += BLOCK;
            compress(state, state->buffer, 0);
            state->buffered = 0;
        }
        size_t take = BLOCK - state->buffered < length ? BLOCK - state->buffered : length;
        memcpy(state->buffer + state->buffered, data, take);
        state->buffered += take;
        data += take;
        length -= take;
    }
}

/* The state a seed names: keyed for a 16-byte digest, its key block compressed (a message follows),
 * the prefix taken in. 0, or -1 (a seed of no such layout: ValueError). */
static int
seeded(Blake2b *state, const uint8_t *seed, Py_ssize_t length)
{
    size_t key_length = length > 0 ? seed[0] : 0;
    if (length < 1 || key_length > 64 || (size_t)length < 1 + key_length) {
        PyErr_SetString(PyExc_ValueError, "a hash seed is the key's length, the key and the prefix");
        return -1;
    }
    memcpy(state->h, blake2b_iv, sizeof state->h);
    state->h[0] ^= 0x01010000ULL ^ ((uint64_t)key_length << 8) ^ 16;
    state->counter = 0;
    state->buffered = 0;
    if (key_length) {
        uint8_t block[BLOCK] = {0};
        memcpy(block, seed + 1, key_length);
        state->counter = BLOCK;
        compress(state, block, 0);
    }
    absorb(state, seed + 1 + key_length, (size_t)length - 1 - key_length);
    return 0;
}

static PyObject *seed_objects[SEEDS];
static Blake2b seed_states[SEEDS];
static int next_seed;

/* The ready state of `seed` (an exact bytes object), made at its first use; NULL with an error. */
static const Blake2b *
ready_state(PyObject *seed)
{
    for (int i = 0; i < SEEDS; i++)
        if (seed_objects[i] == seed)
            return &seed_states[i];
    Blake2b made;
    if (seeded(&made, (const uint8_t *)PyBytes_AS_STRING(seed), PyBytes_GET_SIZE(seed)) < 0)
        return NULL;
    int slot = next_seed;
    next_seed = (next_seed + 1) % SEEDS;
    PyObject *previous = seed_objects[slot];
    seed_objects[slot] = Py_NewRef(seed);
    seed_states[slot] = made;
    Py_XDECREF(previous); /* (bytes: freeing it runs no Python code) */
    return &seed_states[slot];
}

/* The hex digest (a str) of the seed's state given `message` (never empty); NULL with an error. */
static PyObject *
keyed_hex_digest(PyObject *seed, const char *message, Py_ssize_t length)
{
    const Blake2b *ready = ready_state(seed);
    if (ready == NULL)
        return NULL;
    if (length <= 0 && ready->buffered == 0) {
        PyErr_SetString(PyExc_ValueError, "keyed_hex_digest(): the key block needs a message after it");
        return NULL;
    }
    Blake2b state = *ready;
    absorb(&state, (const uint8_t *)message, (size_t)length);
    state.counter += state.buffered;
    memset(state.buffer + state.buffered, 0, BLOCK - state.buffered);
    compress(&state, state.buffer, 1);
    PyObject *hex = PyUnicode_New(32, 127);
    if (hex == NULL)
        return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(hex);
    for (int i = 0; i < 16; i++) {
        uint8_t byte = (uint8_t)(state.h[i / 8] >> (8 * (i % 8)));
        out[2 * i] = "0123456789abcdef"[byte >> 4];
        out[2 * i + 1] = "0123456789abcdef"[byte & 0xf];
    }
    return hex;
}

#undef BLOCK
#undef SEEDS
