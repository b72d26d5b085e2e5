# One VPC with one public subnet: the hosts talk to each other on the ports below only, and to
# the package registries and S3 outward; SSH comes from one CIDR.

resource "aws_vpc" "this" {
  #checkov:skip=CKV2_AWS_11:A scale test of a few hours; flow logs would cost more than they tell here
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = var.name }
}

# Nothing may use the default group: it is left with no rules.
resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = var.name }
}

resource "aws_subnet" "hosts" {
  vpc_id                  = aws_vpc.this.id
  cidr_block              = cidrsubnet(var.vpc_cidr, 4, 0)
  availability_zone       = var.availability_zone
  map_public_ip_on_launch = false
  tags                    = { Name = "${var.name}-hosts" }
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.this.id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this.id
  }
  tags = { Name = var.name }
}

resource "aws_route_table_association" "hosts" {
  subnet_id      = aws_subnet.hosts.id
  route_table_id = aws_route_table.public.id
}

locals {
  # Between the test's own hosts only: NATS clients and routes, its monitoring; Spark's master,
  # worker, driver and block manager (fixed by the plan's spark-submit); the replicator's
  # metrics; locust's master and its web UI.
  member_ports = {
    nats_client     = 4222
    nats_routes     = 6222
    nats_monitor    = 8222
    spark_master    = 7077
    spark_worker    = 7078
    spark_driver    = 7079
    spark_blocks    = 7080
    spark_master_ui = 8080
    spark_worker_ui = 8081
    replicator      = 9108
    locust_master   = 5557
    locust_ui       = 8089
  }
}

resource "aws_security_group" "hosts" {
  #checkov:skip=CKV2_AWS_5:Attached to every instance in modules/hosts, which checkov does not follow across modules
  name        = "${var.name}-hosts"
  description = "stream-replicator scale test hosts"
  vpc_id      = aws_vpc.this.id
  tags        = { Name = "${var.name}-hosts" }
}

resource "aws_vpc_security_group_ingress_rule" "members" {
  for_each                     = local.member_ports
  security_group_id            = aws_security_group.hosts.id
  referenced_security_group_id = aws_security_group.hosts.id
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  description                  = "${each.key} between the test's hosts"
}

# Every executor's block manager (shuffle blocks) starts at spark_blocks and takes the next port
# when it is taken (spark.port.maxRetries, 16): a worker runs an executor of each replicator
# instance, a standby's included.
resource "aws_vpc_security_group_ingress_rule" "spark_blocks_range" {
  security_group_id            = aws_security_group.hosts.id
  referenced_security_group_id = aws_security_group.hosts.id
  ip_protocol                  = "tcp"
  from_port                    = 7081
  to_port                      = 7096
  description                  = "Spark block managers after the first, between the test's hosts"
}

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  security_group_id = aws_security_group.hosts.id
  cidr_ipv4         = var.ssh_cidr
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  description       = "SSH from the operator"
}

resource "aws_vpc_security_group_egress_rule" "https" {
  security_group_id = aws_security_group.hosts.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "package registries (Debian, PyPI) and S3"
}

resource "aws_vpc_security_group_egress_rule" "http" {
  security_group_id = aws_security_group.hosts.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
  description       = "Debian's package mirrors"
}

resource "aws_vpc_security_group_egress_rule" "members" {
  security_group_id            = aws_security_group.hosts.id
  referenced_security_group_id = aws_security_group.hosts.id
  ip_protocol                  = "-1"
  description                  = "any port to the test's own hosts"
}
