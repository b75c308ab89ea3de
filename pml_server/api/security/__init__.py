"""Who may call: API keys, their tenants and roles (`auth`), reloading the keys file while
serving (`key_reload`), and signed page tokens (`page_tokens`) (docs/operations.md)."""
