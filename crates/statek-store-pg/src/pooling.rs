//! Transaction pooling (PgBouncer `pool_mode = transaction`): the start-up
//! check of the session settings that statek cannot send itself there.
//!
//! Outside pooling mode the settings of
//! [`crate::StoreConfig`] travel as startup options of every pooled
//! connection. A transaction-mode pooler may refuse that parameter (PgBouncer
//! before 1.20 does unless `ignore_startup_parameters` lists it) and would
//! not keep it per client anyway, so under pooling the role or database
//! must carry them (`ALTER ROLE ... SET`), and registration checks that it
//! does.

use crate::ConnectionError;
use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::StoreError;

/// The server's values of the named settings, in their base unit with the
/// unit appended (`5000ms`; `on` for a setting without unit), and the role.
const SELECT_SETTINGS: &str = "
    SELECT current_user::text AS role, name, setting || coalesce(unit, '') AS setting
    FROM pg_settings
    WHERE name = ANY ($1)
    ORDER BY name";

/// Compares the server's values of `settings` (name, expected value in the
/// setting's base unit, as `crate::StoreConfig::session_settings` writes
/// them) with the expected ones, in the list's order.
///
/// # Errors
/// [`ConnectionError::SessionSettingMismatch`](crate::ConnectionError::SessionSettingMismatch) for the first that differs.
pub(crate) async fn check_session_settings(
    db: &Db<'_>,
    settings: &[(&'static str, String)],
) -> Result<(), StoreError> {
    let names: Vec<&str> = settings.iter().map(|(name, _)| *name).collect();
    let rows = db
        .query(SELECT_SETTINGS, &[(&names, Type::TEXT_ARRAY)])
        .await?;
    for (setting, expected) in settings {
        let mut found = String::from("(unknown setting)");
        let mut role = String::new();
        for row in &rows {
            role = row.try_get("role")?;
            if row.try_get::<_, &str>("name")? == *setting {
                found = row.try_get("setting")?;
            }
        }
        if found != *expected {
            return Err(StoreError::Connection(
                ConnectionError::SessionSettingMismatch {
                    setting,
                    expected: expected.clone(),
                    found,
                    role,
                },
            ));
        }
    }
    Ok(())
}
