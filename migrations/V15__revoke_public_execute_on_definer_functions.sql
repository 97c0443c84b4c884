-- Why: PostgreSQL grants EXECUTE on every new function to PUBLIC. Two of
-- statek's SECURITY DEFINER functions kept that default grant:
-- `statek.claim_allowance` (V9, replaced by V13; it locks tenant limit
-- rows FOR UPDATE) and `statek.record_reservation_loss` (V10; it writes
-- loss evidence and can halt a shard). Every other SECURITY DEFINER
-- function of the schema revokes it in its migration. The role profile
-- (`statek roles apply`) revokes every function from PUBLIC, and PUBLIC
-- has no USAGE on the schema, so neither was reachable through the
-- profile. But a role given USAGE on `statek` by hand (a read-only
-- monitoring role, say) could call both with the owner's rights: lock a
-- tenant's limits row, or record a loss and halt a shard.
--
-- From this migration on, no SECURITY DEFINER function in schema `statek`
-- is executable by PUBLIC in a freshly migrated database; the roles that
-- call them get EXECUTE from the role profile. A store test
-- (`roles::no_security_definer_function_is_executable_by_public`) checks
-- the catalogue for every such function, not only these two.
--
-- Nothing is rewritten; the statement takes a moment.

REVOKE ALL ON FUNCTION statek.claim_allowance(text[], bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.record_reservation_loss(text, boolean, integer, integer, jsonb, text, text)
    FROM PUBLIC;
