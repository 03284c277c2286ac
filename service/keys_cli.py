"""`evoharness keys new|hash`: make API keys and the hashed records the service is configured with.

    evoharness keys new --id acme-agent --role agent --tenant acme   # prints the key (once) and its record
    printf %s "$KEY" | evoharness keys hash                          # prints the SHA-256 to store
"""

from __future__ import annotations

import argparse
import json
import sys

from service.auth import ROLES, TENANT_PATTERN, hash_key, new_key


def _new(args: argparse.Namespace) -> int:
    if not TENANT_PATTERN.match(args.tenant):
        print(f"evoharness: tenant must match {TENANT_PATTERN.pattern}", file=sys.stderr)
        return 2
    key = new_key()
    record = {"id": args.id, "role": args.role, "tenant": args.tenant, "sha256": hash_key(key)}
    print(f"key (give it to the client, it is not stored anywhere): {key}", file=sys.stderr)
    print(json.dumps(record))
    return 0


def _hash(args: argparse.Namespace) -> int:
    secret = args.key if args.key is not None else sys.stdin.read().strip()
    if not secret:
        print("evoharness: no key on stdin", file=sys.stderr)
        return 2
    print(hash_key(secret))
    return 0


def add_parser(sub) -> None:
    keys = sub.add_parser("keys", help="make API keys and their hashed records").add_subparsers(dest="action",
                                                                                               required=True)
    n = keys.add_parser("new", help="a fresh key: the key on stderr, its record (JSON, hashed) on stdout")
    n.add_argument("--id", required=True)
    n.add_argument("--role", required=True, choices=list(ROLES))
    n.add_argument("--tenant", default="default")
    n.set_defaults(func=_new)
    h = keys.add_parser("hash", help="SHA-256 of a key (read from stdin) as stored in a key record")
    h.add_argument("--key", default=None, help="the key (default: read stdin; avoids shell history)")
    h.set_defaults(func=_hash)
