"""Catalogue data: more exemplar requests for javascript, typescript, html/css, sql, pandas,
data pipelines (see :mod:`registry.dispatch.domains.examples_code`). Data only.
"""

from __future__ import annotations

JAVASCRIPT = (
    "show a spinner while the data loads and hide it when it is done",
    "the whole page reloads when someone submits the signup form",
    "pass data from a child component back up to its parent",
    "dependency resolution fails when I install the packages of the front end",
    "the menu closes as soon as I move the mouse toward it",
    "read a value from the address bar query string",
    "the app calls the backend twice when the screen opens",
    "copy text to the clipboard when the user clicks a button",
    "the browser blocks my request to another domain",
    "keep the user logged in across page reloads",
    "format a date for the user's locale in the browser",
    "a timer keeps running after the user leaves the page",
    "validate a form before it is sent and show errors next to the fields",
    "sort a table in the browser when the user clicks a column header",
    "the server responds slowly because every request waits on a file read",
    "write a small REST API server with routes for items",
    "an uncaught promise rejection crashes my server",
)

TYPESCRIPT = (
    "the compiler says a property does not exist on my object type",
    "make a function accept any object that has an id field",
    "type the props of a component that takes children",
    "narrow an unknown value coming from JSON to a known shape",
    "share types between the front end and the back end",
)

HTML_CSS = (
    "the text on my site is tiny on phones, make it readable",
    "a flash of unstyled content appears before the styles apply",
    "the button text overflows on small screens",
    "put two boxes side by side and stack them on narrow screens",
    "make an image fill its container without stretching it",
    "the background colour does not cover the whole page",
    "add a smooth fade when the menu opens",
    "the print version of the page should hide the navigation",
    "a table is too wide for phones, make it scroll sideways",
    "make the links visible when someone navigates with the keyboard",
    "the fonts look different in another browser",
    "create a card with rounded corners and a soft shadow",
)

SQL = (
    "for each product, which month had the highest sales",
    "show each employee's salary next to the average salary of their department",
    "find customers who signed up twice with slightly different emails",
    "count orders per customer including customers with no orders",
    "the weekly totals do not match the sum of the daily totals",
    "list the second highest salary in each department",
    "rows come back once per payment instead of once per order",
    "delete duplicate rows but keep one of each",
    "why is counting distinct users per day so slow on a big table",
    "pivot the monthly totals into one column per month",
    "which customers have not ordered anything in the last ninety days",
    "two sessions update the same row and one of them waits forever",
    "store a many to many relationship between students and courses",
    "percentage of each category in the total, in one query",
    "the report is slow because it filters on a function of the date column",
)

PANDAS = (
    "explode a column of lists into separate rows",
    "group the table by customer and keep the latest row of each group",
    "the numbers turn into floats after I merge two tables",
    "read a file with a semicolon separator and a comma as the decimal mark",
    "compute the percentage change month over month per region",
    "the loop over rows is slow, do it column-wise instead",
    "bin ages into ranges and count people per range",
    "join two tables on the nearest earlier timestamp",
    "my notebook runs out of memory loading a big CSV",
    "fill gaps in a daily series with zeros for missing days",
)

PIPELINES = (
    "the import job that runs at night sometimes loads the same file twice",
    "make the nightly load safe to rerun without creating duplicates",
    "the job that copies yesterday's events to the warehouse fails halfway",
    "partition a large table of events by day so queries read less",
    "the stream consumer falls behind during peak hours",
    "orchestrate three dependent jobs and retry the failed one",
    "load only the rows that changed since the last run",
    "validate incoming files before they reach the reporting tables",
    "the transformation job is slow because one customer has most of the records",
    "keep a history of changes to customer records in the warehouse",
    "move data from the production database to the analytics store every hour",
)
