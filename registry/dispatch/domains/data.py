"""Catalogue data: sql, pandas, data pipelines (the seed's ``data-lora`` domains) and
no-code tools (spreadsheets, website builders; no specialist in the seed fleet).

Data only (see :mod:`registry.dispatch.catalogue` for the notation).
"""

from __future__ import annotations

from registry.dispatch.domain_spec import DomainSpec

SQL = DomainSpec(
    name="sql",
    aliases=(
        "databases",
        "database",
        "postgres",
        "postgresql",
        "mysql",
        "rdbms",
        "query optimization",
        "data modeling",
    ),
    strong="""
    sql-syntax=0.8|sql|postgres|postgresql|psql|pg_dump=0.5|mysql|mariadb|sqlite=0.8|sqlite3=0.8|
    ~oracle=0.5|sql server|mssql|t-sql|tsql|pl/pgsql|plpgsql|query plan(s)|explain analyze|
    explain plan|left join|right join|inner join|outer join|full outer join|cross join|
    anti join|anti-join|semi join|self join|join(s)=0.6|group by|order by|where clause|
    having clause|window function(s)|partition by|row_number|dense_rank|
    lag=0.4|cte(s)|common table expression(s)|recursive cte|subquery|subqueries|
    correlated subquery|not exists|null(s)=0.4|create index|index(es)=0.5|
    composite index|covering index|index scan|seq scan|full table scan|primary key(s)|
    foreign key(s)|unique constraint|constraint(s)=0.5|unique violation|uniqueviolation|
    isolation level(s)|deadlock(s)=0.5|upsert|on conflict|merge into|insert into|
    stored procedure(s)|materialized view(s)|schema design|normaliz*|denormaliz*|
    star schema|snowflake schema|fact table(s)|dimension table(s)|data warehouse|olap|oltp|
    bigquery|redshift|clickhouse|duckdb|~snowflake=0.7|partition pruning|sargable|
    psycopg|psycopg2|asyncpg|pgbouncer|vacuum|autovacuum|sql_mode|only_full_group_by|
    query=0.5|queries=0.5|single query=0.8|one query=0.7|slow query=0.9|aggregate(s)=0.5|
    sql injection=0.5|orm=0.4|sqlalchemy|n+1|n+1 queries|n+1 query|joinedload|selectinload|
    select_related|prefetch_related|eager loading=0.8|eager load=0.8|
    running total|cumulative sum|rolling sum|most recent row|latest row per|top n per group|
    retention cohort|cohort(s)=0.5|deduplicate|duplicate rows|
    create table|alter table|drop table|varchar|distinct=0.5|union all|coalesce|nullif|
    date_trunc|information_schema|foreign key constraint|auto_increment|serial primary key
    """,
    weak="""
    table(s)|row(s)|column(s)|database|db|records|select|insert|update|delete|schema|
    migration(s)|transaction(s)|lock(s)|report(s)|customers|orders|users|events|sales|
    revenue|total|totals|count|per customer|per user|per day|per week|per month
    """,
    files=".sql|.ddl|.dbml|migrations/*.sql|queries/=0.6|*.sqlite=0.6|*.db=0.4",
    outranks=("python", "debugging", "testing"),
    exemplars=(
        "get the most recent row for each customer from a large events table",
        "my total doubled after I joined orders with payments",
        "the query ignores the index on the created_at column",
        "find customers who bought in January but not in February",
        "running total of the balance per account ordered by date",
        "count signups per week and how many came back within seven days",
        "NOT IN with a subquery returns no rows when the list has nulls",
        "will creating an index lock the table while we keep writing",
        "design the schema for orders, customers and invoices",
        "rewrite this report query so that it uses window functions",
        "star schema or snowflake schema for a reporting warehouse",
        "make the insert idempotent with an upsert",
        "deduplicate rows that have the same email keeping the newest",
        "explain the difference between WHERE and HAVING",
    ),
)

PANDAS = DomainSpec(
    name="pandas",
    aliases=("dataframes", "dataframe", "numpy and pandas", "data analysis", "data wrangling"),
    strong="""
    ~pandas|dataframe(s)|data frame(s)|pd.dataframe|df=0.7|groupby|group-by|read_csv|
    to_csv|read_parquet|to_parquet|read_excel|pivot_table|melt|iloc|loc=0.5|dtype(s)|
    astype|settingwithcopywarning|dtypewarning|chained assignment|vectoriz*|vectorise|
    polars|dask|modin|pyarrow|series=0.4|assert_frame_equal|value_counts|fillna|dropna|
    isna|merge=0.5|concat=0.5|resample|rolling window|rolling average|rolling mean|
    moving average|time series|timedelta=0.5|datetimeindex|multiindex|
    seaborn=0.5|matplotlib=0.5|plotly=0.4|exploratory data analysis|eda|data cleaning|
    missing values|nan values|csv file(s)=0.6|csv=0.6|excel file(s)=0.5|jupyter=0.4|
    pd=0.8|inplace=0.7|reset_index|set_index|to_datetime|pd.to_datetime|axis=0.4|
    nunique|idxmax
    """,
    weak="""
    column(s)|row(s)|table|dataset|data set|data|average|mean|median|aggregate|plot|chart|
    numpy|np|array|clean|cleaning|missing|duplicates|per store|per day|daily|weekly|monthly
    """,
    files=".csv=0.6|.tsv=0.6|.parquet=0.8|.feather|.ipynb=0.6|notebooks/=0.5",
    outranks=("python", "debugging", "testing"),
    exemplars=(
        "convert a column of strings to timedelta when some rows are empty",
        "compute a seven day rolling average of sales per store with gaps in the dates",
        "left anti join of two data frames",
        "this groupby apply takes forever on five million rows",
        "warning about setting a value on a copy of a slice",
        "mixed types warning when reading a CSV file",
        "reshape a table from wide to long format",
        "fill missing values with the previous value per group",
        "unit test data transformation functions with small hand built frames",
        "plot monthly totals from a spreadsheet export",
        "merge two tables on a date that does not match exactly",
        "why does my average per group differ from what finance reports",
    ),
)

PIPELINES = DomainSpec(
    name="data pipelines",
    aliases=(
        "data pipeline",
        "pipelines",
        "etl",
        "elt",
        "data engineering",
        "data engineer",
        "data processing",
    ),
    strong="""
    etl|elt|data pipeline(s)|~pipeline(s)=0.5|~airflow|dag(s)=0.8|dbt|~spark|pyspark|
    spark sql|kafka|kafka consumer(s)|consumer lag|flink|apache beam|dataflow|luigi|prefect|
    dagster|ingestion|ingest=0.8|backfill(s)=0.8|idempotent load(s)|incremental load(s)|
    full refresh|cdc|change data capture|debezium|data lake|lakehouse|delta lake|
    ~iceberg|hudi|parquet|avro|orc=0.5|s3=0.4|batch job(s)=0.6|nightly job(s)=0.6|
    late-arriving|late arriving|watermark(s)=0.6|schema evolution|data quality|
    great expectations|fivetran|airbyte|stitch=0.3|data warehouse=0.6|databricks|hive|
    hadoop|hdfs|emr|aws glue|kinesis|pub/sub|event stream(s)|stream processing|
    exactly-once|at-least-once|deduplication|data contract(s)|lineage|partitioning=0.6|
    skew=0.5|salting|broadcast join|shuffle=0.5|out of memory spark|medallion|
    bronze silver gold|upstream extract|downstream tables|snowflake=0.6|bigquery=0.5
    """,
    weak="""
    job(s)|schedule(d)|scheduler|nightly|daily|batch|load|extract|transform|dashboard(s)|
    source system|raw data|events|logs|warehouse|s3 bucket|cloud storage
    """,
    files="dags/=1.0|dbt_project.yml|profiles.yml=0.6|pipelines/=0.6|etl/=0.8|.avro|.orc",
    # a dbt test or an Airflow DAG that fails on CI is pipeline work, not CI configuration (a
    # CI workflow asked for as the deliverable still goes to CI/CD: intent.py decides first)
    outranks=("python", "debugging", "testing", "ci/cd"),
    exemplars=(
        "design an idempotent daily load from object storage into the warehouse",
        "our nightly jobs miss records that arrive late from upstream",
        "the backfill re-inserts days that were already partly loaded",
        "Spark join dies with out of memory because one key has most of the rows",
        "Airflow task stays queued and never runs",
        "parquet or CSV for hundreds of gigabytes of event logs",
        "consumer lag keeps growing on the ingestion topic",
        "structure dbt models into staging and marts",
        "the morning dashboard shows zeros until the extract lands",
        "deduplicate events from a stream that delivers at least once",
        "schedule a job that moves yesterday's data into the reporting tables",
    ),
)

SPREADSHEETS = DomainSpec(
    name="no-code tools",
    aliases=("spreadsheets", "excel", "no-code", "spreadsheet", "website builders"),
    strong="""
    excel|~spreadsheet(s)|google sheets|vlookup|xlookup|pivot table(s)|conditional formatting|
    airtable|notion|zapier|make.com|wix|squarespace|wordpress|shopify|webflow|
    google forms|power bi=0.6|tableau=0.6|looker studio|crm|salesforce|hubspot|
    sales pipeline=1.2|deal pipeline|sales funnel|pipedrive
    """,
    files=".xlsx|.xls|.ods|.numbers|.xlsm",
    exemplars=(
        "which formula looks up a price in another sheet",
        "Squarespace or Wix for a small bakery website",
        "my spreadsheet budget: can I afford this rent",
        "build a simple form that saves answers into a sheet without code",
        "which deals in our CRM should the sales team stop chasing",
    ),
)

DOMAINS = (SQL, PANDAS, PIPELINES, SPREADSHEETS)
