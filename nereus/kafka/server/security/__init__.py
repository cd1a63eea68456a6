"""Authorization (ACLs), authentication (SASL, SCRAM credentials) and client quotas."""
