"""The local stack: the real handlers and state machine on moto, simulators of Vast and Cloudflare,
an S3 stand-in and local hosts running the real agent, on one machine (`tether demo`,
`tether local up`, the e2e tests). An install extra: `pip install '.[local]'`."""
