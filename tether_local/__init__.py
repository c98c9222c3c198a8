"""The local stack: the real handlers and state machine on moto, simulators of Vast and Cloudflare,
an S3 stand-in and local hosts running the real agent, on one machine (`tether demo`,
`tether local up`, the e2e tests). An install extra: `pip install '.[local]'`.

Its wings, each named for what it stands in for: `aws` (local AWS on moto), `r2` (Cloudflare R2:
the credentials API, the R2 front, rclone's S3), `vast_sim` (the Vast.ai API and its offer
book), `hosts` (the rented machines running the agent), and over them `http` (the loopback HTTP
servers: the simulators and the API front), `stack` (`LocalStack`, the one composition) and
`demo` (`tether demo`, its invariants, and `tether rehearse` on the same machinery).
"""
