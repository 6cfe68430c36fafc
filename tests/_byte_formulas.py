"""Byte counts the tests expect, written from the protocols' message formats."""


def offset_sum_bytes(n_clients, d):
    """Bytes of the common offset's secure sum per data client (complete graph below 10).

    ``up``: the masked column sums (d int64), their structure ("array", its length, "int":
    16 bytes) and a 32-byte self-mask share per neighbour back in the unmasking; ``peer``
    (client ``j``): a 16-byte seed to every later neighbour (set-up) and, to every
    neighbour, a 32-byte self-mask share and a 16-byte share of each of its ``deg`` per-sum
    pair keys; ``down``: who dropped (no one: an empty announcement, 0 bytes).
    """
    deg = n_clients - 1
    return {
        "up": 8 * d + 16 + 32 * deg,
        "peer": [16 * (deg - j) + (32 + 16 * deg) * deg for j in range(n_clients)],
        "down": 0,
    }
