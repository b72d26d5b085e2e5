# The bucket every host reads the wheel and the scenario from and writes its reports to, and
# the instance role that lets the hosts do exactly that (and reach SSM for a shell).

resource "random_id" "suffix" {
  byte_length = 4
}

resource "aws_kms_key" "reports" {
  description             = "${var.name} reports"
  deletion_window_in_days = 7
  enable_key_rotation     = true
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "AccountAdministers"
      Effect    = "Allow"
      Principal = { AWS = "arn:aws:iam::${data.aws_caller_identity.current.account_id}:root" }
      Action    = "kms:*"
      Resource  = "*"
    }]
  })
}

data "aws_caller_identity" "current" {}

resource "aws_s3_bucket" "reports" {
  #checkov:skip=CKV_AWS_18:Access logs of a test bucket that lives for hours would need a second bucket for nothing
  #checkov:skip=CKV_AWS_144:Reports of a test run need no copy in another region
  #checkov:skip=CKV2_AWS_62:Nothing listens for the reports; make scale-report collects them
  bucket        = "${var.name}-${random_id.suffix.hex}"
  force_destroy = true
}

resource "aws_s3_bucket_versioning" "reports" {
  bucket = aws_s3_bucket.reports.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "reports" {
  bucket = aws_s3_bucket.reports.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.reports.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_public_access_block" "reports" {
  bucket                  = aws_s3_bucket.reports.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_lifecycle_configuration" "reports" {
  bucket = aws_s3_bucket.reports.id
  rule {
    id     = "expire"
    status = "Enabled"
    filter {}
    expiration {
      days = var.keep_days
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

resource "aws_s3_object" "uploads" {
  for_each   = var.uploads
  bucket     = aws_s3_bucket.reports.id
  key        = each.key
  source     = each.value
  etag       = filemd5(each.value)
  kms_key_id = aws_kms_key.reports.arn
}

resource "aws_iam_role" "hosts" {
  name = "${var.name}-hosts"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "ec2.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
}

resource "aws_iam_role_policy" "bucket" {
  name = "bucket"
  role = aws_iam_role.hosts.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Effect   = "Allow"
        Action   = ["s3:ListBucket"]
        Resource = [aws_s3_bucket.reports.arn]
      },
      {
        Effect   = "Allow"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
        Resource = ["${aws_s3_bucket.reports.arn}/*"]
      },
      {
        Effect   = "Allow"
        Action   = ["kms:Decrypt", "kms:GenerateDataKey"]
        Resource = [aws_kms_key.reports.arn]
      },
    ]
  })
}

resource "aws_iam_role_policy_attachment" "ssm" {
  role       = aws_iam_role.hosts.name
  policy_arn = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "hosts" {
  name = "${var.name}-hosts"
  role = aws_iam_role.hosts.name
}
