#!/usr/bin/env python3
"""
NATS credentials (.creds files) with the Python standard library only.

`troupe creds` gives each agent a .creds file: a user JWT and the user's nkey seed. To connect, a client
reads the server's INFO `nonce`, signs it with the seed's Ed25519 key and sends the JWT and the signature
in CONNECT:

    import nkeys
    fields = nkeys.connect_fields("pyecho.creds", info["nonce"])   # {"jwt": "...", "sig": "..."}
    connect.update(fields)                                          # then CONNECT {...}

What is in here:
  * read_creds: the JWT and the seed out of a .creds file
  * decode_seed: an nkey seed is base32 (RFC 4648, no padding) of
        [2 prefix bytes: 'S' + key type] [32-byte Ed25519 seed] [CRC-16/XMODEM, little-endian]
  * Ed25519 signing after RFC 8032 section 5.1 (pure Python, from the RFC's formulas)

Ed25519 here is correct but not constant-time: fine for signing a connection nonce on your own machine,
not for a shared host where someone can time your process. Python 3.8+.

Run as a script it prints what a .creds file holds (never the seed):
    python3 nkeys.py agent.creds [nonce]   ->  {"public_key": "U...", "name": "...", "sig": "..."}
"""
import base64
import hashlib
import json
import sys

__all__ = ["read_creds", "decode_seed", "KeyPair", "connect_fields", "ed25519_public_key", "ed25519_sign"]

# ---------------------------------------------------------------------------------------------------
# Ed25519 (RFC 8032 section 5.1): twisted Edwards curve -x^2 + y^2 = 1 + d x^2 y^2 over GF(2^255 - 19)
# ---------------------------------------------------------------------------------------------------

P = 2**255 - 19                                                # the field
L = 2**252 + 27742317777372353535851937790883648493            # order of the base point
D = -121665 * pow(121666, P - 2, P) % P                        # curve constant d = -121665/121666


def _inv(x):
    return pow(x, P - 2, P)  # Fermat: x^(p-2) = 1/x mod p


def _recover_x(y, sign):
    """Section 5.1.3: x from y and the sign bit (x^2 = (y^2 - 1) / (d y^2 + 1))."""
    x2 = (y * y - 1) * _inv(D * y * y + 1) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * pow(2, (P - 1) // 4, P) % P
    if (x * x - x2) % P != 0:
        raise ValueError("not a point on the curve")
    if x & 1 != sign:
        x = P - x
    return x


# Points are extended homogeneous coordinates (X, Y, Z, T) with x = X/Z, y = Y/Z, x*y = T/Z (5.1.4).
_BY = 4 * _inv(5) % P
_BX = _recover_x(_BY, 0)
BASE = (_BX, _BY, 1, _BX * _BY % P)
NEUTRAL = (0, 1, 1, 0)


def _add(p, q):
    """Point addition for a = -1 (5.1.4); also right for doubling."""
    a = (p[1] - p[0]) * (q[1] - q[0]) % P
    b = (p[1] + p[0]) * (q[1] + q[0]) % P
    c = 2 * p[3] * q[3] * D % P
    d = 2 * p[2] * q[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _multiply(scalar, point):
    result = NEUTRAL
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _encode_point(point):
    """Section 5.1.2: y in 255 bits little-endian, the low bit of x on top."""
    zinv = _inv(point[2])
    x, y = point[0] * zinv % P, point[1] * zinv % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _sha512_int(*parts):
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little")


def _expand(seed):
    """Section 5.1.5: the secret scalar (clamped first half of SHA-512(seed)) and the nonce prefix."""
    if len(seed) != 32:
        raise ValueError("an Ed25519 seed is 32 bytes")
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8  # clear the 3 low bits and everything from bit 254 up
    a |= 1 << 254
    return a, h[32:]


def ed25519_public_key(seed):
    a, _ = _expand(seed)
    return _encode_point(_multiply(a, BASE))


def ed25519_sign(seed, message):
    """Section 5.1.6: R = rB, S = r + H(R, A, M) a mod L; the signature is R || S (64 bytes)."""
    a, prefix = _expand(seed)
    public = _encode_point(_multiply(a, BASE))
    r = _sha512_int(prefix, message) % L
    big_r = _encode_point(_multiply(r, BASE))
    k = _sha512_int(big_r, public, message) % L
    s = (r + k * a) % L
    return big_r + s.to_bytes(32, "little")


# ---------------------------------------------------------------------------------------------------
# nkeys
# ---------------------------------------------------------------------------------------------------

_PREFIX_SEED = 18 << 3   # 'S'
_PREFIX_USER = 20 << 3   # 'U'


def _crc16(data):
    """CRC-16/XMODEM (polynomial 0x1021, initial value 0), as nkeys uses."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def _b32decode(text):
    return base64.b32decode(text + "=" * (-len(text) % 8))


def _b32encode(raw):
    return base64.b32encode(raw).decode("ascii").rstrip("=")


def decode_seed(seed):
    """A user seed ('SU...') -> the 32-byte Ed25519 seed. Raises ValueError on a bad checksum or type."""
    try:
        raw = _b32decode(seed.strip())
    except (ValueError, TypeError) as err:
        raise ValueError(f"the nkey seed is not base32: {err}") from None
    if len(raw) != 36:
        raise ValueError("an nkey seed decodes to 36 bytes")
    body, checksum = raw[:-2], int.from_bytes(raw[-2:], "little")
    if _crc16(body) != checksum:
        raise ValueError("the nkey seed's checksum does not match: the .creds file is damaged")
    if body[0] & 0xF8 != _PREFIX_SEED:
        raise ValueError("not an nkey seed (it must start with S)")
    key_type = (body[0] & 0x07) << 5 | (body[1] & 0xF8) >> 3
    if key_type != _PREFIX_USER:
        raise ValueError("not a user seed (it must start with SU)")
    return body[2:34]


class KeyPair:
    """A user nkey: signs with Ed25519 and knows its public key ('U...')."""

    def __init__(self, seed):
        self._seed = decode_seed(seed)

    @property
    def public_key(self):
        body = bytes([_PREFIX_USER]) + ed25519_public_key(self._seed)
        return _b32encode(body + _crc16(body).to_bytes(2, "little"))

    def sign(self, data):
        return ed25519_sign(self._seed, data)


def read_creds(source):
    """(jwt, seed) from a .creds file's path or text: the first and second block between dashed lines."""
    if "\n" in source:
        text = source
    else:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    blocks, inside = [], False
    for line in text.splitlines():
        line = line.strip()
        is_marker = len(line) >= 6 and line.startswith("---") and line.endswith("---")
        if is_marker:
            inside = "BEGIN" in line
        elif inside and line:
            blocks.append(line)
            inside = False
    if len(blocks) < 2:
        raise ValueError("not a .creds file: expected a user JWT block and an nkey seed block")
    jwt, seed = blocks[0], blocks[1]
    if jwt.count(".") != 2 or not seed.startswith("SU"):
        raise ValueError("not a .creds file: the first block must be a JWT and the second a user seed (SU...)")
    return jwt, seed


def connect_fields(creds, nonce):
    """The CONNECT fields that authenticate with a .creds file: the JWT and the signed server nonce."""
    jwt, seed = read_creds(creds)
    sig = KeyPair(seed).sign(nonce.encode("utf-8"))
    return {"jwt": jwt, "sig": base64.urlsafe_b64encode(sig).decode("ascii").rstrip("=")}


def _jwt_name(jwt):
    body = jwt.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))).get("name")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print("usage: nkeys.py <file.creds> [nonce]", file=sys.stderr)
        sys.exit(2)
    try:
        user_jwt, user_seed = read_creds(sys.argv[1])
        out = {"public_key": KeyPair(user_seed).public_key, "name": _jwt_name(user_jwt)}
        if len(sys.argv) == 3:
            out["sig"] = connect_fields(sys.argv[1], sys.argv[2])["sig"]
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(out))
