"""The rented machines, locally: hosts that run the real agent, as renting on the Vast simulator
starts them on Vast.

Modules: `local_hosts` (`LocalHosts`: a process group per instance, running `tether-agent run`
with a directory as its disk, stopped, destroyed and faulted as the chaos controls ask),
`images` (stand-ins for the job's container images: a venv per image, built once),
`agent_install` (the agent's venv from the same wheel the onstart script installs, built once),
`fake_nvml` (a stand-in for NVML's Python binding, for the agent's real GPU probe).
"""
