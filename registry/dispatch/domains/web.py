"""Catalogue data: javascript, typescript, html/css (the seed's ``web-lora`` domains).

Data only (see :mod:`registry.dispatch.catalogue` for the notation).
"""

from __future__ import annotations

from registry.dispatch.domain_spec import LANGUAGE_OUTRANKS, DomainSpec

JAVASCRIPT = DomainSpec(
    name="javascript",
    aliases=("js", "ecmascript", "node", "nodejs", "node.js", "frontend", "front-end", "react"),
    strong="""
    javascript-syntax=0.8|javascript|js|ecmascript|es6|es2020|node.js|nodejs|~node=0.6|npm|npx|yarn=0.7|pnpm|
    react|reactjs|react.js|~vue|vue.js|vuejs|angular|angularjs|svelte|sveltekit|next.js|nextjs|
    nuxt|~express=0.7|express.js|expressjs|koa|nestjs|webpack|vite|rollup=0.6|esbuild|babel|
    eslint|prettier|jest|vitest|mocha|cypress|playwright|puppeteer|jquery|lodash|axios|
    console.log|document.queryselector|addeventlistener|event listener(s)|event handler(s)=0.6|
    click handler(s)|promise(s)=0.7|promise.all|async/await|callback hell|closures=0.4|
    useeffect|usestate|usememo|usecallback|useref|usecontext|react hook(s)|custom hook(s)|jsx|
    redux|zustand|react query|tanstack|react router|props=0.6|prop drilling|hydration|
    server-rendered|server-side rendering|ssr=0.6|spa|single-page app(s)|
    single page application(s)|service worker(s)|web worker(s)|websocket(s)=0.6|
    fetch api|fetch=0.4|localstorage|sessionstorage|cookies=0.4|cors=0.7|dom|
    virtual dom|event loop=0.4|settimeout|setinterval|debounce|throttle=0.5|deno|~bun|
    electron|node_modules|commonjs|es module(s)|esm|import.meta|
    import.meta.env|process.env|browser console|devtools|chrome devtools|
    undefined is not a function|cannot read properties of undefined|uncaught|
    referenceerror|syntaxerror=0.5|strict equality|json.parse|json.stringify|
    req.body|req.params|req.query|res.json|res.send|res.status|app.listen|app.use|
    module.exports|exports.handler=0.6|document.getelementbyid|innerhtml|queryselector|
    queryselectorall|classlist|onclick=0.8|foreach=0.5|undefined=0.5
    """,
    weak="""
    browser|frontend|front-end|front end|component(s)|hook(s)|state|render|rendering|
    client-side|client side|web app|webapp|website|button|page|form|api call|async|await|
    const|let|var|arrow function(s)|callback(s)|bundle|bundler
    """,
    files="""
    .js|.mjs|.cjs|.jsx|.vue|.svelte|package.json|package-lock.json|yarn.lock|pnpm-lock.yaml|
    .eslintrc|.eslintrc.js|.eslintrc.json|eslint.config.js|.prettierrc|webpack.config.js|
    vite.config.js|vite.config.ts|next.config.js|babel.config.js|.babelrc|.nvmrc|
    *.test.js=1.0|*.spec.js=1.0|*.test.jsx|*.test.tsx|*.spec.tsx|*.test.ts|*.spec.ts|
    node_modules/=0.6|components/=0.4
    """,
    outranks=LANGUAGE_OUTRANKS,
    exemplars=(
        "why is my array still empty after I push results inside forEach with async callbacks",
        "debounce a search input without a library",
        "my React component renders twice and fires the effect twice",
        "Cannot read properties of undefined on the first render of my list",
        "Express error handling middleware is never called for async route handlers",
        "the click handler fires twice on every click",
        "how do I wait for several fetch requests to finish before continuing",
        "explain the difference between == and === in JavaScript",
        "Node server blocks the event loop when it reads a huge file",
        "migrating the bundler config: environment variables are undefined now",
        "users keep seeing the old version of our single page app after a deploy",
        "hydration mismatch on a component that shows the current time",
        "write a custom lint rule that bans default exports",
        "running my script gives: cannot use import statement outside a module",
        "store the user's theme choice in the browser and restore it on load",
        "implement infinite scrolling in a list component",
        "state updates in my component are not reflected immediately",
        "write tests for a React component with a mocked API call",
    ),
)

TYPESCRIPT = DomainSpec(
    name="typescript",
    aliases=("ts", "typescript programming"),
    strong="""
    typescript|tsc|tsconfig|ts-node|type annotation(s)=0.5|discriminated union(s)|
    union type(s)|type guard(s)|keyof|typeof=0.5|as const|mapped type(s)|conditional type(s)|
    utility type(s)|generic type(s)=0.6|interface(s)=0.4|type alias(es)|enum(s)=0.3|
    strictnullchecks|noimplicitany|type assertion(s)|non-null assertion|.d.ts|declaration file(s)|
    is not assignable to type|ts2322|ts2345|zod|trpc|angular=0.5|deno=0.5
    """,
    weak="type(s)|typed|generic(s)|interface|strict mode|infer|inferred|inference",
    files=".ts|.tsx|.mts|.cts|tsconfig.json|tsconfig.*.json|*.d.ts",
    outranks=LANGUAGE_OUTRANKS,
    exemplars=(
        "Type string or undefined is not assignable to type string",
        "type a generic fetch hook so callers get the data type inferred",
        "model loading and error states as a discriminated union",
        "how do I make a type that requires at least one of two properties",
        "convert this JavaScript module to TypeScript with strict mode",
        "the compiler cannot narrow the type after my check",
    ),
)

HTML_CSS = DomainSpec(
    name="html/css",
    aliases=(
        "html",
        "css",
        "html and css",
        "html css",
        "web design",
        "styling",
        "frontend styling",
    ),
    strong="""
    html|html5|css|css3|scss|sass|~less=0.5|tailwind|tailwindcss|bootstrap=0.6|flexbox|
    css grid|grid layout|grid-template-columns|media query|media queries|responsive=0.7|
    responsive design|viewport|z-index|position: sticky|position sticky|sticky header|
    sticky=0.5|margin(s)=0.5|padding=0.4|font-size|line-height|box-sizing|box model|
    aria|aria-label|aria roles|accessibility|accessible=0.6|a11y|screen reader(s)|wcag|
    semantic html|div(s)|span=0.4|css selector(s)|selector(s)=0.5|pseudo-class(es)|
    pseudo-element(s)|hover=0.5|keyframes|css animation(s)|
    animation(s)=0.5|transition(s)=0.4|transform=0.5|will-change|layout shift|cls=0.5|
    aspect-ratio|object-fit|dark mode=0.6|prefers-color-scheme|css variable(s)|
    custom properties|word-break|overflow-wrap|overflow=0.5|text-overflow|ellipsis=0.4|
    flex=0.6|justify-content|align-items|display:flex|display: flex|inline-block|
    centering a div|center a div|navbar|footer=0.5|header=0.3|sidebar=0.5|dropdown=0.6|
    modal=0.5|tooltip=0.5|web page(s)|webpage(s)|landing page|html form(s)|input field(s)|
    form input(s)|label(s)=0.3|stylesheet(s)|inline style(s)|browser compatibility|
    cross-browser|svg=0.5|favicon|meta tag(s)|open graph|email template(s)=0.6|scroll=0.4|
    scrolling=0.4|scrollbar|lazy loading|image placeholder|
    font-family|font-weight|background-color|border-radius|box-shadow|text-align|
    flex-direction|flex-wrap|min-height|max-width=0.6|href=0.5|rem=0.3|px=0.4
    """,
    weak="""
    page|layout|style|styles|styling|design|looks|color(s)|colour(s)|font(s)|image(s)|
    button(s)|mobile|desktop|screen|width|height|align|aligned|wrap|wrapping|box|boxes
    """,
    files="""
    .html|.htm|.css|.scss|.sass|.less=0.8|.styl|tailwind.config.js|index.html|styles/=0.5
    """,
    outranks=LANGUAGE_OUTRANKS,
    exemplars=(
        "make the header sticky and shrink it when the user scrolls",
        "my footer does not stay at the bottom when the content is short",
        "center an element horizontally and vertically",
        "the page jumps around while images load, reserve the space up front",
        "long words overflow their box instead of wrapping",
        "form labels and inputs do not line up when labels have different lengths",
        "which roles and keyboard handlers does a custom dropdown need to be accessible",
        "add a dark theme that follows the system setting",
        "the slide-in animation is janky on phones",
        "build a responsive three column layout that collapses on small screens",
        "style the scrollbar and hide it on mobile",
        "the modal is behind the navigation bar even with a high z-index",
        "write the markup for a pricing table",
    ),
)

DOMAINS = (JAVASCRIPT, TYPESCRIPT, HTML_CSS)
