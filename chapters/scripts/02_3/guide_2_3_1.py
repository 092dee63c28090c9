class CustomDataset(torch.utils.data.Dataset):
    def __init__(self, file_list, transform=None):
        self.file_list = file_list
        self.transform = transform

    def __len__(self):
        return len(self.file_list)

    def __getitem__(self, index):
        img_path = self.file_list[index]
        image = PIL.Image.open(img_path).convert('RGB')
        label = self.get_label(img_path)
        if self.transform:
            image = self.transform(image)
        return image, label
