"""Catalogue data: docker, k8s, ci/cd, shell (the seed's ``devops-lora`` domains) and the
infrastructure around them (terraform, cloud, servers), networking and security.

Data only (see :mod:`registry.dispatch.catalogue` for the notation). ``related`` lets the
specialist of docker/k8s/ci/cd/shell take Terraform, cloud and server tasks when no
specialist serves those directly (the seed's "Infrastructure" note); networking and security
have no such fallback.
"""

from __future__ import annotations

from registry.dispatch.domain_spec import DomainSpec

DOCKER = DomainSpec(
    name="docker",
    aliases=("containers", "container", "containerization", "podman"),
    decisive="""
    dockerfile=1.5|docker-compose=1.5|docker compose=1.5|compose file=1.3|dockerfile-syntax=1.4
    """,
    deliverables="""
    dockerfile|docker-compose|docker compose file|compose file|docker image|container image|
    multi-stage build|devcontainer
    """,
    strong="""
    ~docker=1.2|~dockers|~container(s)=0.8|containerize*|containerise*|podman|buildkit|buildx|
    multi-stage build(s)|multi-stage|docker hub|dockerhub|docker image(s)|container image(s)|
    image size=0.6|base image|from scratch=0.6|distroless|alpine=0.5|entrypoint=0.7|
    healthcheck=0.6|bind mount(s)|docker volume(s)|docker network|docker run|docker build|
    docker exec|restart policy|nvidia container toolkit|container registry|--gpus|--restart|
    --privileged|--network|--volume=0.5|--env-file|
    ecr=0.6|gcr=0.6|ghcr|image layer(s)|layer caching|build context|
    container runtime|containerd|oci image|workdir|expose=0.4
    """,
    weak="image(s)|volume(s)|layer(s)|port(s)|host|localhost|isolation|sandbox",
    files="""
    dockerfile=1.5|containerfile=1.5|*.dockerfile=1.5|dockerfile.*=1.5|docker-compose.yml=1.5|
    docker-compose.yaml=1.5|docker-compose.*.yml=1.5|compose.yml=1.3|compose.yaml=1.3|
    .dockerignore=1.3
    """,
    related=(("k8s", 0.7),),
    outranks=("python", "c", "c++", "low-level", "javascript", "typescript", "html/css"),
    exemplars=(
        "write a Dockerfile for my web app with a non-root user and a small image",
        "my container image is two gigabytes, how do I make it smaller",
        "the container keeps restarting a few seconds after it starts",
        "from inside the container the service cannot reach the database by hostname",
        "the app in one service cannot connect to the database in another service on localhost",
        "make the container start again automatically after the server reboots",
        "COPY fails because the file is not in the build context",
        "multi-stage build with a tiny final image that still has certificates",
        "share a volume between two containers",
        "expose the GPU to a container",
        "cache dependency layers so rebuilds are fast",
    ),
)

K8S = DomainSpec(
    name="k8s",
    aliases=("kubernetes", "kube", "openshift", "container orchestration", "helm"),
    decisive="helm chart(s)=1.5|kubernetes manifest(s)=1.5|k8s manifest(s)=1.5",
    deliverables="""
    helm chart(s)|kubernetes manifest(s)|k8s manifest(s)|deployment manifest(s)|manifest(s)|
    kubernetes deployment|k8s deployment|kustomization|statefulset|cronjob|ingress rule(s)
    """,
    strong="""
    kubernetes=1.2|k8s=1.2|kubectl=1.2|helm=1.2|minikube|k3s|kind cluster|kubelet|kubeadm|
    pod(s)=0.9|deployment(s)=0.5|statefulset(s)|daemonset(s)|replicaset(s)|cronjob(s)=0.6|
    ingress=0.9|ingress controller|configmap(s)|secret(s)=0.3|namespace(s)=0.4|
    service account(s)|rbac=0.6|node pool(s)|nodes=0.4|liveness|readiness=0.7|
    liveness probe(s)|readiness probe(s)|startup probe(s)|hpa|horizontal pod autoscaler|
    cluster autoscaler|argo cd|argocd|argo rollouts|flux=0.5|kustomize|kustomization|eks|
    gke|aks|crd(s)|custom resource(s)|operator(s)=0.3|service mesh|istio|linkerd|envoy=0.6|
    cert-manager|manifest(s)=0.7|crashloopbackoff|imagepullbackoff|oomkilled|evicted=0.6|
    pending=0.3|taint(s)|toleration(s)|affinity=0.4|resource limits|resource requests|
    rollout undo|rollout|persistentvolumeclaim|pvc|persistent volume(s)|etcd|control plane=0.5|
    outofsync|out of sync=0.4|mutating webhook|admission webhook|replica(s)=0.5|
    apiversion=1.2|kind deployment|containerport|imagepullpolicy|livenessprobe|readinessprobe|
    configmapkeyref|secretkeyref|matchlabels|nodeselector
    """,
    weak="cluster(s)|node(s)|scale|scaling|replicas|deploy|orchestration|sidecar",
    files="""
    k8s/=1.2|kubernetes/=1.2|manifests/=1.0|helm/=1.2|charts/=1.2|chart.yaml=1.5|
    values.yaml=1.0|kustomization.yaml=1.5|deployment.yaml=1.0|service.yaml=0.7|
    ingress.yaml=1.2
    """,
    related=(("docker", 0.7),),
    outranks=("python", "c", "c++", "low-level", "javascript", "typescript", "html/css"),
    exemplars=(
        "write the deployment, service and ingress for my app with three replicas",
        "pods are stuck pending because of insufficient memory",
        "what happens if I configure only a liveness probe and the app warms up slowly",
        "override a nested value of a chart from the command line",
        "roll back a bad release on the cluster",
        "GitOps tool shows the app out of sync because a webhook adds labels",
        "the pod is killed with out of memory although the node has free memory",
        "mount a secret as a file in a pod",
        "autoscale my service on CPU usage",
    ),
)

CICD = DomainSpec(
    name="ci/cd",
    aliases=(
        "ci",
        "cd",
        "cicd",
        "ci cd",
        "continuous integration",
        "continuous delivery",
        "continuous deployment",
        "devops",
        "build pipelines",
    ),
    deliverables="""
    github actions workflow|github action|workflow file|ci workflow|ci pipeline|ci job|
    ci config|ci configuration|pipeline stage|gitlab pipeline|gitlab ci|jenkinsfile|
    jenkins pipeline|release pipeline|deploy pipeline|deployment pipeline|build pipeline|
    release workflow|deploy job|build matrix
    """,
    strong="""
    ci/cd=1.2|cicd|ci=0.9|continuous integration|continuous deployment|continuous delivery|
    github actions=1.3|github action|gitlab ci=1.3|gitlab-ci|jenkins=1.2|jenkinsfile|circleci|
    travis ci|azure pipelines|azure devops|buildkite|teamcity|bamboo=0.3|drone ci|
    tekton|spinnaker|workflow(s)=0.5|workflow file|ci pipeline(s)|build pipeline(s)|
    release pipeline(s)|deploy pipeline(s)|deployment pipeline(s)|~pipeline=0.4|
    ci job(s)|build job(s)|runner(s)=0.5|self-hosted runner(s)|artifact(s)=0.4|
    build matrix|matrix build|cache key=0.6|blue-green|blue/green|canary release(s)|
    canary deployment(s)|zero downtime=0.7|zero-downtime=0.7|rollback(s)=0.5|
    release process=0.5|semantic-release|dependabot|renovate bot|pre-commit=0.5|
    runs-on=1.2|workflow_dispatch|github.ref|github.event|actions checkout|before_script|
    after_script|
    on push=0.5|pull_request trigger|tag push|release tag|
    ecs=0.6|fargate=0.6|alb=0.5|deploy(s)=0.4|deployment=0.4|deploying=0.4
    """,
    weak="build(s)|release(s)|job(s)|stage(s)|trigger(s)|tag(s)|branch(es)|merge",
    files="""
    .github/workflows/=1.5|.gitlab-ci.yml=1.5|jenkinsfile=1.5|.circleci/=1.5|
    azure-pipelines.yml=1.5|.travis.yml=1.5|bitbucket-pipelines.yml=1.5|.drone.yml=1.5|
    cloudbuild.yaml=1.2|buildspec.yml=1.2|.pre-commit-config.yaml=0.8|
    .github/dependabot.yml=1.0|.github/=0.6
    """,
    outranks=("python", "c", "c++", "low-level", "javascript", "typescript", "html/css"),
    exemplars=(
        "only run the publish job when the pushed tag matches a version",
        "make the deploy job wait for the test job to pass",
        "cache dependencies between jobs of the same pipeline",
        "set up a workflow that runs the tests on every pull request",
        "blue green deployment with a quick rollback",
        "the pipeline passes locally but the runner fails to find the tool",
        "should on-call roll back with the cluster tool or redeploy the previous tag",
        "build and push the image on every merge to main",
        "run the test suite on three versions in parallel",
    ),
)

SHELL = DomainSpec(
    name="shell",
    aliases=("bash", "sh", "zsh", "shell scripting", "shell scripts", "command line", "cli"),
    deliverables="""
    bash script|shell script|cron job|crontab|crontab entry|shell one-liner
    """,
    strong="""
    ~bash=1.1|zsh|fish shell|~shell=0.8|shell script(s)=1.2|shell scripting|bash script(s)=1.2|
    cron=0.9|crontab|cron job(s)|cronjob=0.5|set -e|set -euo|pipefail|sed|awk|grep=0.8|
    xargs|chmod|chown|sudo=0.6|bash_profile|bashrc|
    zshrc|path variable|environment variable(s)=0.5|env var(s)=0.5|export=0.4|
    alias(es)=0.4|heredoc|shebang|stdin|stdout=0.5|stderr=0.5|redirect(ion)=0.5|
    exit code(s)|exit status|subshell|posix shell|powershell=0.6|tmux|screen session|
    nohup|rsync|scp=0.6|tar=0.4|curl=0.4|wget=0.5|jq|find -exec|one-liner|oneliner|
    command line=0.6|command-line=0.6|terminal=0.5|script=0.3|
    echo=0.5|esac|bin/bash|usr/bin/env=0.5|nohup
    """,
    weak="command(s)|run|loop|files|folder(s)|directory|directories|rename|copy|move|backup(s)",
    files=".sh|.bash|.zsh|.fish|.bashrc|.zshrc|.bash_profile|.profile|crontab|scripts/=0.4",
    related=(("docker", 0.3),),
    exemplars=(
        "stop my setup script at the first command that fails",
        "what does set -euo pipefail do",
        "the scheduled job works when I run it by hand but not at its scheduled time",
        "rename all files in a folder to lowercase",
        "write a script that backs up a database every night and deletes old backups",
        "loop over lines of a file that contain spaces",
        "where should environment variables go so that a service sees them",
        "find files larger than a gigabyte and delete the old ones",
        "pipe the output of one command into another and keep the exit status",
        "the variable is empty inside the while loop after the pipe",
    ),
)

TERRAFORM = DomainSpec(
    name="terraform",
    aliases=("infrastructure as code", "iac", "opentofu", "pulumi", "cloudformation"),
    deliverables="terraform module|terraform config|terraform configuration|terraform",
    strong="""
    terraform=1.2|opentofu|hcl|tfstate|terraform plan|terraform apply|tfvars|pulumi|
    cloudformation|aws cdk|infrastructure as code|iac|state file|remote state|terragrunt
    """,
    files=".tf=1.3|.tfvars=1.3|.hcl=0.8|terraform/=1.0|.terraform.lock.hcl",
    related=(("ci/cd", 0.8), ("docker", 0.8), ("k8s", 0.8), ("shell", 0.8)),
    exemplars=(
        "Terraform wants to recreate the database when I change a tag",
        "split one big Terraform configuration into modules",
        "import an existing bucket into the infrastructure state",
    ),
)

CLOUD = DomainSpec(
    name="cloud",
    aliases=("aws", "gcp", "azure", "cloud infrastructure"),
    strong="""
    aws|amazon web services|ec2|~lambda=0.5|aws lambda|iam|iam role(s)|cloudwatch|
    cloudfront|route 53|route53|load balancer(s)=0.7|alb=0.6|elb|vpc|security group(s)|
    gcp|google cloud|cloud run|app engine|azure|heroku|fly.io|render.com|digitalocean|
    ~vercel=0.6|netlify=0.6|auto scaling group|autoscaling group|s3 bucket(s)=0.5
    """,
    related=(("ci/cd", 0.8), ("docker", 0.8), ("k8s", 0.8)),
    exemplars=(
        "give an instance role permission to read one bucket",
        "zero downtime deployments behind a load balancer",
        "our cloud bill doubled, where do I look first",
    ),
)

SERVERS = DomainSpec(
    name="servers",
    aliases=("linux administration", "sysadmin", "system administration", "operations", "ops"),
    deliverables="""
    nginx config|nginx configuration|systemd unit|systemd service|unit file|ansible playbook|
    playbook|reverse proxy config
    """,
    strong="""
    nginx=1.4|~apache=0.6|httpd|caddy=0.6|haproxy|traefik|systemd|systemctl|journalctl|
    unit file=1.2|systemd unit=1.4|ansible=1.4|ansible playbook|playbook(s)=0.8|
    inventory file|~chef=0.3|
    ~puppet=0.4|saltstack|ssh=0.9|sshd|openssh|ssh key(s)|authorized_keys|reverse proxy|
    bad gateway|502|504 gateway timeout|firewall=0.6|iptables|nftables|ufw|selinux|
    logrotate|linux server|ubuntu server|vps|letsencrypt|let's encrypt|certbot|
    tls certificate(s)|ssl certificate(s)|server reboot|uptime=0.4|load average|
    disk space|disk full|inode(s)|swap=0.4|oom killer|fail2ban|vagrant|supervisord
    """,
    weak="server(s)|service(s)|daemon|restart|reboot|port|logs|config|linux|ubuntu|debian",
    files="""
    nginx.conf=1.3|nginx/=1.0|*.service=1.2|*.timer=1.0|sshd_config=1.2|ansible/=1.2|
    playbooks/=1.2|playbook.yml=1.2|inventory.ini=1.0|hosts.ini=0.8|deploy/=0.4|
    site.conf=0.6|*.conf=0.4|haproxy.cfg=1.2|caddyfile=1.2|supervisord.conf=1.0
    """,
    related=(("shell", 0.9), ("docker", 0.8), ("ci/cd", 0.8), ("k8s", 0.7)),
    exemplars=(
        "the reverse proxy returns 502 although the app answers on its port",
        "restart the web server only when its templated config changed",
        "ssh to the new server hangs during the key exchange",
        "the service starts by hand but not at boot",
        "renew TLS certificates automatically",
        "the disk is full but I cannot find which files use the space",
    ),
)

NETWORKING = DomainSpec(
    name="networking",
    aliases=("networks", "network engineering"),
    strong="""
    tcp|udp|tcp/ip|dns=0.8|dns resolution|osi model|osi|ip address(es)|ipv4|ipv6|subnet(s)|
    cidr|vpn|bgp|nat=0.6|dhcp|packet loss|congestion control|slow start|aimd|http/2|http/3|
    quic|tls handshake|three-way handshake|wifi|wi-fi|router=0.7|modem|mesh network|
    mtu|latency=0.3|ping=0.5|traceroute|wireshark|tcpdump|proxy server|socks
    """,
    weak="network|networking|packets|internet|bandwidth|connection",
    exemplars=(
        "explain how TCP congestion control works",
        "how does DNS resolution work from my laptop to the root servers",
        "what is the difference between a VPN and a proxy",
        "my home wifi drops every evening",
        "explain the OSI model and how the internet differs from it",
    ),
)

SECURITY = DomainSpec(
    name="security",
    aliases=("appsec", "application security", "cybersecurity", "infosec"),
    strong="""
    xss=0.7|cross-site scripting=0.7|csrf=0.7|sql injection=0.6|injectable=0.5|
    injection=0.4|vulnerability=0.6|vulnerabilities=0.6|cve=0.8|owasp=0.8|
    penetration test(s)=0.8|pentest=0.8|threat model(ing)=0.8|password hashing=0.6|bcrypt=0.5|
    argon2=0.5|two-factor authentication=0.6|2fa=0.6|phishing=0.8|malware=0.8|ransomware=0.8|
    encryption=0.5|zero trust=0.6|secrets management=0.6|sbom=0.6
    """,
    weak="security|secure|attack|attacker|exploit|auth|authentication|password(s)",
    exemplars=(
        "how do I turn on two-factor authentication for my email account",
        "is this email a phishing attempt",
        "what should a threat model for a small web app cover",
    ),
)

DOMAINS = (DOCKER, K8S, CICD, SHELL, TERRAFORM, CLOUD, SERVERS, NETWORKING, SECURITY)
