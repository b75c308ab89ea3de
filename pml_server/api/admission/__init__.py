"""Admission control: which calls run, when, and how much they may answer. `refusal` turns a
tenant over quota away before its request is read; `quotas` counts each tenant's calls and CPU;
`fairness` makes long calls give way to lighter tenants; `stream_slots` bounds open streams;
`budget` bounds an answer's bytes (docs/reliability.md, Flooding and Expensive tenants)."""
