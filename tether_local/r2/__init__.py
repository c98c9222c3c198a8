"""Cloudflare R2, locally: the credentials API, R2's S3 endpoint with R2's checks, and the data.

Modules: `cloudflare_sim` (the Cloudflare API simulator: mints R2 temporary credentials that
expire, scoped to a bucket and prefixes, revoked with their parent), `front` (the R2 front: a
loopback S3 endpoint that judges every request against the key as the simulator holds it and
relays the allowed ones), `auth` (the front's decisions without I/O: SigV4, the operation, the
key's scope, R2's error codes), `s3server` (`rclone serve s3`, the S3 data plane behind the
front).
"""
