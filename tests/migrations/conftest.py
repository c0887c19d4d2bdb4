from tests.support.databases import database_url, postgres_url, sqlite_url

__all__ = ["database_url", "postgres_url", "sqlite_url"]
